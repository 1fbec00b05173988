// The live decision stream: the last decisions (GET /v1/decisions/recent), then live over SSE, filterable.
// The stream is read with fetch (EventSource cannot send the Authorization header) and reopened when it ends.
"use strict";
(function () {
  const el = shoal.el, MAX = 500;
  const KINDS = ["scheduled", "pipelined", "unschedulable", "evicted", "bound", "bind-failed", "gpu-shared"];
  const events = [];
  let paused = false;

  function what(e) {
    const d = e.data || {}, kind = e.type.split(".").pop();
    if (kind === "unschedulable") return (d.reason ? d.reason + ": " : "") + shoal.withoutReason(d.reason, d.message);
    if (kind === "evicted") return "[" + d.action + "] by " + d.by + ": " + (d.message || "");
    if (kind === "bind-failed") return "-> " + d.node + ": " + d.error;
    if (kind === "gpu-shared") return "-> " + d.node + " shared GPU " + (d.gpuGroups || []).join(",");
    return "-> " + (d.node || "?");
  }

  function shown(e) {
    const kind = e.type.split(".").pop();
    const box = document.querySelector('#decision-kinds input[value="' + kind + '"]');
    if (box && !box.checked) return false;
    const text = document.getElementById("decision-filter").value.trim().toLowerCase();
    return !text || (e.subject + " " + e.shard + " " + what(e)).toLowerCase().includes(text);
  }

  function row(e) {
    const kind = e.type.split(".").pop();
    return el("tr", { class: kind, onclick: () => shoal.explain(e.subject) },
      el("td", { title: e.time }, (e.time || "").slice(11, 23)), el("td", {}, kind), el("td", {}, e.shard || ""),
      el("td", {}, e.subject), el("td", {}, what(e)));
  }

  function render() {
    const body = document.querySelector("#decisions tbody");
    body.textContent = "";
    const frag = document.createDocumentFragment();
    for (let i = events.length - 1; i >= 0; i--) if (shown(events[i])) frag.append(row(events[i]));
    body.append(frag);
  }

  function add(e) {
    events.push(e);
    if (events.length > MAX) events.shift();
    if (paused) return;
    if (shown(e)) {
      const body = document.querySelector("#decisions tbody");
      body.insertBefore(row(e), body.firstChild);
      while (body.children.length > MAX) body.removeChild(body.lastChild);
    }
  }

  // one SSE message (its lines): a decision is added; ": connected" means the subscription is live
  function message(lines) {
    if (lines.includes(": connected")) shoal.setStatus("live", true);
    const data = lines.filter(l => l.startsWith("data:")).map(l => l.slice(5).trimStart()).join("\n");
    if (!data) return;
    try { add(JSON.parse(data)); } catch (e) { /* not a decision: ignore it */ }
  }

  async function follow() {
    for (;;) {
      try {
        const response = await shoal.fetch("v1/decisions", { headers: { Accept: "text/event-stream" } });
        if (!response.ok) {
          if (response.status === 401) shoal.askToken();
          let why = response.status + " " + response.statusText;
          try { why = (await response.json()).error || why; } catch (e) { /* not JSON */ }
          throw new Error(why);
        }
        const reader = response.body.getReader(), decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            message(buffer.slice(0, end).split("\n"));
            buffer = buffer.slice(end + 2);
          }
        }
        shoal.setStatus("decision stream: reconnecting…", false);
      } catch (e) { shoal.fail("decision stream", e); }
      await new Promise(r => setTimeout(r, 3000));
    }
  }

  shoal.stream = {
    async start() {
      try {
        const body = await shoal.getJSON("v1/decisions/recent?limit=200");
        body.decisions.forEach(e => events.push(e));
        render();
      } catch (e) { shoal.fail("decisions", e); }
      follow();
    },
    init() {
      const kinds = document.getElementById("decision-kinds");
      for (const k of KINDS) kinds.append(el("label", {}, el("input", { type: "checkbox", value: k, checked: true, onchange: render }), " " + k));
      document.getElementById("decision-filter").addEventListener("input", render);
      const pause = document.getElementById("decision-pause");
      pause.addEventListener("click", () => { paused = !paused; pause.textContent = paused ? "resume" : "pause"; if (!paused) render(); });
    },
  };
})();

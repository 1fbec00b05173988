// The GPU map: every node (grouped by node pool) with its GPUs as cells, from GET /v1/cluster.
"use strict";
(function () {
  const el = shoal.el, PAGE = 200;
  const view = { data: null, offset: 0 };

  function podsOf(cell) { return cell.pods || cell.parts || []; }

  function describe(cell, node) {
    const lines = [node.name + " · " + cell.state];
    if (cell.state === "shared" || (cell.state === "releasing" && cell.parts)) {
      lines.push("shared GPU, " + (cell.usedMilli / 10) + "% allocated");
      if (cell.reservation) lines.push("reservation pod " + cell.reservation);
    }
    for (const p of podsOf(cell)) {
      lines.push(p.pod + (p.milli ? " (" + p.milli / 10 + "%)" : "") + " · queue " + (p.queue || "–")
        + " · pod group " + (p.podGroup || "–") + (p.releasing ? " · releasing" : ""));
    }
    if (cell.pipelined) lines.push("a pipelined pod waits for it");
    return lines.join("\n");
  }

  function cellEl(cell, node, index) {
    const pods = podsOf(cell), first = pods[0];
    const attrs = { class: "cell " + cell.state + (cell.pipelined ? " pipelined" : ""), title: describe(cell, node),
      "data-node": node.name, "data-index": index, "data-state": cell.state };
    if (first) { attrs["data-pod"] = pods.map(p => p.pod).join(" "); }
    const c = el("span", attrs);
    if (cell.state === "whole" && first) c.style.background = shoal.colour(first.queue);
    if (cell.state === "shared" || (cell.parts && cell.parts.length)) {
      for (const part of cell.parts) {
        c.append(el("b", { style: "width:" + part.milli / 10 + "%;background:" + shoal.colour(part.queue) }));
      }
    }
    return c;
  }

  function nodeEl(node) {
    const cls = "node" + (node.ready ? "" : " notready") + (node.unschedulable ? " cordoned" : "");
    const used = node.cells.filter(c => c.state !== "free").length;
    const meta = [node.gpus + " GPUs", used + " in use", node.pods + " pods"];
    if (node.product) meta.unshift(node.product);
    if (!node.ready) meta.push("not ready");
    if (node.unschedulable) meta.push("cordoned");
    const cells = el("div", { class: "cells" });
    node.cells.forEach((cell, i) => cells.append(cellEl(cell, node, i)));
    const card = el("div", { class: cls, "data-node": node.name }, el("div", { class: "name", title: node.name }, node.name),
      el("div", { class: "meta" }, meta.join(" · ")), cells);
    if (node.pipelined.length) {
      card.append(el("div", { class: "waiting", title: node.pipelined.map(p => p.pod).join("\n") },
        "pipelined: " + node.pipelined.map(p => p.pod).join(", ")));
    }
    return card;
  }

  function matches(node, text) {
    if (!text) return true;
    if (node.name.toLowerCase().includes(text)) return true;
    for (const cell of node.cells) {
      for (const p of podsOf(cell)) {
        if ((p.pod + " " + (p.queue || "") + " " + (p.podGroup || "")).toLowerCase().includes(text)) return true;
      }
    }
    return node.pipelined.some(p => p.pod.toLowerCase().includes(text));
  }

  function render() {
    const started = performance.now();
    const data = view.data, root = document.getElementById("gpu-map");
    const text = document.getElementById("gpu-filter").value.trim().toLowerCase();
    const poolSelect = document.getElementById("gpu-pool");
    const all = data.shards.flatMap(s => s.nodes);
    shoal.fillSelect(poolSelect, [...new Set(all.map(n => n.pool))].sort(), "all node pools");
    const chosen = all.filter(n => (!poolSelect.value || n.pool === poolSelect.value) && matches(n, text));
    chosen.sort((a, b) => (a.pool + "\u0000" + a.name).localeCompare(b.pool + "\u0000" + b.name));
    if (view.offset >= chosen.length) view.offset = 0;
    const shown = chosen.slice(view.offset, view.offset + PAGE);
    const pools = new Map();
    for (const node of shown) { if (!pools.has(node.pool)) pools.set(node.pool, []); pools.get(node.pool).push(node); }
    const totals = new Map();
    for (const node of all) {
      const t = totals.get(node.pool) || { nodes: 0, gpus: 0, used: 0 };
      t.nodes += 1; t.gpus += node.gpus; t.used += node.cells.filter(c => c.state !== "free").length;
      totals.set(node.pool, t);
    }
    const frag = document.createDocumentFragment();
    for (const [pool, nodes] of pools) {
      const t = totals.get(pool);
      const grid = el("div", { class: "nodes" });
      for (const node of nodes) grid.append(nodeEl(node));
      frag.append(el("div", { class: "pool", "data-pool": pool },
        el("h2", {}, "node pool " + pool, el("span", { class: "count" }, " — " + t.nodes + " nodes, " + t.gpus + " GPUs, " + t.used + " in use")), grid));
    }
    root.textContent = "";
    if (!all.length) root.append(el("p", { class: "empty" }, "No nodes in any snapshot yet (is the snapshotter running?)."));
    else if (!chosen.length) root.append(el("p", { class: "empty" }, "No node matches the filter."));
    root.append(frag);
    shoal.pager(document.getElementById("gpu-pager"), { offset: view.offset, limit: PAGE, total: chosen.length },
      offset => { view.offset = offset; render(); }, chosen.length === 1 ? "node" : "nodes");
    shoal.timings.gpuMapRenderMs = performance.now() - started;
    shoal.timings.gpuMapNodes = all.length;
    shoal.timings.gpuMapCells = root.querySelectorAll(".cell").length;
  }

  function showCell(target) {
    const node = view.data.shards.flatMap(s => s.nodes).find(n => n.name === target.dataset.node);
    if (!node) return;
    const cell = node.cells[Number(target.dataset.index)];
    document.querySelectorAll(".cell.selected").forEach(c => c.classList.remove("selected"));
    target.classList.add("selected");
    const rows = podsOf(cell).map(p => el("tr", {}, el("td", {}, p.pod), el("td", {}, p.milli ? p.milli / 10 + "%" : "whole"),
      el("td", {}, p.queue || "–"), el("td", {}, p.podGroup || "–"),
      el("td", {}, el("button", { type: "button", class: "explain", onclick: () => shoal.explain(p.pod) }, "why?"))));
    const body = [el("h3", {}, node.name + " · GPU cell " + (Number(target.dataset.index) + 1)),
      el("div", { class: "verdict", id: "cell-state" }, cell.state + (cell.pipelined ? " (a pipelined pod waits for it)" : ""))];
    if (cell.reservation) body.push(el("div", {}, "reservation pod " + cell.reservation));
    if (cell.usedMilli !== undefined) body.push(el("div", {}, (cell.usedMilli / 10) + "% of this GPU allocated"));
    if (rows.length) {
      body.push(el("table", { id: "cell-pods" }, el("thead", {}, el("tr", {}, ...["pod", "share", "queue", "pod group", ""].map(h => el("th", {}, h)))),
        el("tbody", {}, ...rows)));
    } else body.push(el("p", { class: "empty" }, "free"));
    if (node.pipelined.length) body.push(el("h4", {}, "pipelined onto this node"), el("div", { class: "trail" }, node.pipelined.map(p => p.pod).join("\n")));
    shoal.showDetail(...body);
  }

  shoal.gpuMap = {
    async refresh() {
      const data = await shoal.getJSON("v1/cluster");
      view.data = data;
      const s = data.summary;
      document.getElementById("sum-nodes").textContent = s.nodes + " nodes";
      document.getElementById("sum-gpus").textContent = s.gpus + " GPUs";
      const pct = s.gpus ? Math.round(100 * s.gpusInUse / s.gpus) : 0;
      document.getElementById("sum-use").textContent = shoal.num(s.gpusInUse) + " GPUs in use (" + pct + "%)";
      if (shoal.state.tab === "gpus") render();
    },
    render() { if (view.data) render(); },
    // for the browser test: draw a given /v1/cluster answer and return the milliseconds it took
    renderData(data) { view.data = data; view.offset = 0; render(); return shoal.timings.gpuMapRenderMs; },
    init() {
      document.getElementById("gpu-filter").addEventListener("input", () => { view.offset = 0; shoal.gpuMap.render(); });
      document.getElementById("gpu-pool").addEventListener("change", () => { view.offset = 0; shoal.gpuMap.render(); });
      document.getElementById("gpu-map").addEventListener("click", e => {
        const cell = e.target.closest(".cell");
        if (cell) showCell(cell);
      });
    },
  };
})();

// Shared helpers of the dashboard: fetching JSON, building elements, formatting, paging, the side panel.
"use strict";
const shoal = window.shoal = { timings: {}, state: {} };

// the caller's Kubernetes bearer token (the token field in the header), kept for this tab only (sessionStorage)
shoal.token = function () { return sessionStorage.getItem("shoal.token") || ""; };
shoal.setToken = function (token) {
  if (token) sessionStorage.setItem("shoal.token", token); else sessionStorage.removeItem("shoal.token");
};
shoal.headers = function () {
  const token = shoal.token();
  return token ? { Authorization: "Bearer " + token } : {};
};
shoal.fetch = function (path, options) {
  return fetch(path, { cache: "no-store", ...(options || {}), headers: { ...shoal.headers(), ...((options || {}).headers || {}) } });
};

shoal.getJSON = async function (path) {
  const response = await shoal.fetch(path);
  if (response.status === 401) shoal.askToken();
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) {
    const why = body && body.error ? body.error : response.status + " " + response.statusText;
    throw new Error(path.split("?")[0] + ": " + why);
  }
  return body;
};

// el("td", {class: "x", title: "…"}, "text", child, …)
shoal.el = function (tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
  return node;
};

shoal.num = function (value) {
  if (value === -1) return "unlimited";
  if (value === null || value === undefined || value === "") return "–";
  return typeof value === "number" ? String(Math.round(value * 1000) / 1000) : String(value);
};

shoal.amount = function (value, resource) {
  if (resource !== "memory" || value === -1 || typeof value !== "number") return shoal.num(value);
  const gib = value / 2 ** 30;
  return (gib >= 1 ? Math.round(gib * 10) / 10 + " GiB" : Math.round(value / 2 ** 20) + " MiB");
};

shoal.time = function (value) {
  if (!value) return "";
  const text = String(value);
  return /^\d{4}-\d\d-\d\dT/.test(text) ? text.slice(11, 19) : text;
};

shoal.ago = function (value) {
  if (!value || !/^\d{4}-/.test(String(value))) return String(value || "");
  const s = Math.max(0, (Date.now() - Date.parse(value)) / 1000);
  if (s < 90) return Math.round(s) + " s ago";
  if (s < 5400) return Math.round(s / 60) + " min ago";
  if (s < 172800) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " days ago";
};

// a verdict's message without the reason it starts with ("OverLimit: …" → "…"), the reason shown apart
shoal.withoutReason = function (reason, message) {
  const text = String(message || "");
  return reason && text.startsWith(reason + ": ") ? text.slice(reason.length + 2) : text;
};

// one colour per queue name, the same for the page's lifetime: twelve distinct ones first, then hues by hash
const PALETTE = ["#2f6fdb", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#319795", "#b7791f", "#e53e3e",
  "#5a67d8", "#718096", "#2c7a7b", "#9c4221"];
const colours = new Map();
shoal.colour = function (name) {
  const key = String(name || "");
  if (!colours.has(key)) {
    let h = 0;
    for (const ch of key) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
    colours.set(key, colours.size < PALETTE.length ? PALETTE[colours.size] : "hsl(" + (h % 360) + ", 55%, 50%)");
  }
  return colours.get(key);
};

shoal.setStatus = function (text, live) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.classList.toggle("live", !!live);
};

// a 401: the api wants a token; the field says so (its placeholder tells how to get one)
shoal.askToken = function () {
  const field = document.getElementById("token");
  field.classList.add("wanted");
  document.getElementById("token-form").title = "this dashboard needs a Kubernetes token: kubectl create token NAME";
};

shoal.fail = function (where, error) {
  shoal.setStatus(where + ": " + (error && error.message ? error.message : error), false);
};

// pager(container, {offset, limit, total}, onPage, noun)
shoal.pager = function (container, page, onPage, noun) {
  container.textContent = "";
  if (page.total <= page.limit) { if (page.total) container.append(page.total + " " + (noun || "in all")); return; }
  const last = Math.floor((page.total - 1) / page.limit) * page.limit;
  const from = page.total ? page.offset + 1 : 0, to = Math.min(page.total, page.offset + page.limit);
  container.append(
    shoal.el("button", { type: "button", disabled: page.offset <= 0, onclick: () => onPage(Math.max(0, page.offset - page.limit)) }, "‹ prev"),
    shoal.el("span", { class: "range" }, from + "–" + to + " of " + page.total),
    shoal.el("button", { type: "button", disabled: page.offset >= last, onclick: () => onPage(page.offset + page.limit) }, "next ›"));
};

shoal.fillSelect = function (select, values, allLabel) {
  const current = select.value;
  select.textContent = "";
  select.append(shoal.el("option", { value: "" }, allLabel));
  for (const v of values) select.append(shoal.el("option", { value: v }, v));
  select.value = values.includes(current) ? current : "";
};

// the side panel
shoal.showDetail = function (...children) {
  const body = document.getElementById("detail-body");
  body.textContent = "";
  body.append(...children);
  document.getElementById("detail").hidden = false;
};

shoal.closeDetail = function () { document.getElementById("detail").hidden = true; };

// the explanation of a pod or pod group (GET /v1/explain), as `shoal explain` prints it
shoal.explain = async function (subject) {
  const [ns, name] = subject.split("/");
  shoal.showDetail(shoal.el("h3", {}, subject), shoal.el("p", { class: "empty" }, "asking why…"));
  let answer;
  try {
    const response = await shoal.fetch("v1/explain/" + encodeURIComponent(ns) + "/" + encodeURIComponent(name));
    answer = await response.json();
    if (!answer || !answer.verdict) throw new Error(answer && answer.error ? answer.error : "HTTP " + response.status);
  } catch (e) {
    shoal.showDetail(shoal.el("h3", {}, subject), shoal.el("p", { class: "verdict evicted" }, "could not explain: " + e.message));
    return;
  }
  shoal.showDetail(...shoal.explanation(answer));
};

shoal.explanation = function (a) {
  const el = shoal.el, out = [el("h3", {}, a.subject), el("div", { class: "verdict " + a.status, id: "explain-verdict" }, a.verdict)];
  if (a.queueLine) out.push(el("div", { id: "explain-queue" }, a.queueLine));
  if (a.queue && !a.queueExists) out.push(el("div", { class: "verdict evicted" }, "queue " + a.queue + " does not exist"));
  out.push(el("dl", {}, el("dt", {}, "status"), el("dd", {}, a.status), el("dt", {}, "pod group"), el("dd", {}, a.podGroup || "–"),
    el("dt", {}, "queue"), el("dd", {}, a.queue || "–"), el("dt", {}, "node pool"), el("dd", {}, a.shard || "–"),
    el("dt", {}, "node"), el("dd", {}, a.node || "–")));
  if (a.queueFigures) {
    const rows = ["gpu", "cpu", "memory"].map(r => {
      const f = a.queueFigures[r] || {};
      return el("tr", {}, el("td", {}, r), ...["deserved", "fairShare", "allocated", "request"].map(k => el("td", {}, shoal.amount(f[k], r))),
        el("td", {}, f.limitNote || shoal.amount(f.limit, r)));
    });
    out.push(el("table", {}, el("thead", {}, el("tr", {}, ...["", "deserved", "fair share", "allocated", "requested", "limit"].map(h => el("th", {}, h)))),
      el("tbody", {}, ...rows)));
  }
  const trail = [];  // [first time, what, repeats, last time]: the same line again right after is counted
  const note = (time, what) => {
    const last = trail[trail.length - 1];
    if (last && last[1] === what) { last[2] += 1; last[3] = time; } else trail.push([time, what, 1, time]);
  };
  for (const e of a.events || []) note(shoal.time(e.time), "event " + e.object + " " + e.reason + ": " + e.message);
  for (const d of a.decisions || []) {
    const data = d.data || {};
    note(shoal.time(d.time), "decision " + d.type.split(".").pop() + " " + d.subject + " " + (data.message || data.node || ""));
  }
  if (trail.length) {
    const lines = trail.map(([time, what, n, lastTime]) => time + " " + what + (n > 1 ? "  (×" + n + ", the last at " + lastTime + ")" : ""));
    out.push(el("h4", {}, "what happened"), el("div", { class: "trail" }, lines.join("\n")));
  }
  return out;
};

// Pending pod groups with their reason (GET /v1/pending) and evicted pods (GET /v1/evictions), paged.
"use strict";
(function () {
  const el = shoal.el, PAGE = 50;
  const state = { pendingOffset: 0, evictedOffset: 0 };

  function query(offset) {
    const q = new URLSearchParams({ offset: offset, limit: PAGE });
    const queue = document.getElementById("pending-queue").value, ns = document.getElementById("pending-namespace").value;
    if (queue) q.set("queue", queue);
    if (ns) q.set("namespace", ns);
    return q.toString();
  }

  function pendingRow(g) {
    const waiting = g.pending + " of " + Math.max(g.minMember, g.pending + g.running + g.pipelined)
      + (g.minMember > 1 ? " (gang of " + g.minMember + ")" : "") + (g.running ? ", " + g.running + " running" : "");
    return el("tr", { "data-pod-group": g.podGroup, onclick: () => shoal.explain(g.podGroup), title: "click: the full explanation" },
      el("td", {}, g.podGroup), el("td", {}, g.queue || "–"), el("td", {}, waiting),
      el("td", { title: g.created }, shoal.ago(g.created)),
      el("td", {}, g.reason ? el("span", { class: "reason" }, g.reason) : null, " ",
        el("span", { class: "message" }, shoal.withoutReason(g.reason, g.message)), el("div", { class: "qline" }, g.queueLine)));
  }

  function evictedRow(e) {
    return el("tr", { "data-pod": e.pod, onclick: () => shoal.explain(e.pod) },
      el("td", { title: e.time }, shoal.time(e.time)), el("td", {}, e.pod), el("td", {}, e.queue || "–"),
      el("td", {}, e.action || "–"), el("td", {}, e.by || "–"), el("td", {}, e.message || ""));
  }

  function fill(id, items, row, empty) {
    const body = document.querySelector("#" + id + " tbody");
    body.textContent = "";
    if (!items.length) body.append(el("tr", {}, el("td", { colspan: 6, class: "empty" }, empty)));
    for (const item of items) body.append(row(item));
  }

  async function refreshPending() {
    const page = await shoal.getJSON("v1/pending?" + query(state.pendingOffset));
    shoal.fillSelect(document.getElementById("pending-queue"), page.queues, "all queues");
    shoal.fillSelect(document.getElementById("pending-namespace"), page.namespaces, "all namespaces");
    fill("pending", page.items, pendingRow, "Nothing is pending.");
    document.getElementById("pending-count").textContent = "(" + page.total + ")";
    document.getElementById("sum-pending").textContent = page.all + " pending";
    shoal.pager(document.getElementById("pending-pager"), page, offset => { state.pendingOffset = offset; refreshPending(); });
    return page;
  }

  async function refreshEvicted() {
    const page = await shoal.getJSON("v1/evictions?" + query(state.evictedOffset));
    fill("evicted", page.items, evictedRow, "No evictions seen since the api started.");
    document.getElementById("evicted-count").textContent = "(" + page.total + ")";
    document.getElementById("sum-evicted").textContent = page.all + " evicted";
    shoal.pager(document.getElementById("evicted-pager"), page, offset => { state.evictedOffset = offset; refreshEvicted(); });
    return page;
  }

  shoal.workloads = {
    async refresh() { await Promise.all([refreshPending(), refreshEvicted()]); },
    init() {
      for (const id of ["pending-queue", "pending-namespace"]) {
        document.getElementById(id).addEventListener("change", () => {
          state.pendingOffset = 0; state.evictedOffset = 0; shoal.workloads.refresh().catch(e => shoal.fail("workloads", e));
        });
      }
    },
  };
})();

// The queue tree: departments → projects, one bar per queue for the chosen resource, from GET /v1/queue-tree.
"use strict";
(function () {
  const el = shoal.el;
  let data = null;

  function pct(value, scale) { return Math.max(0, Math.min(100, 100 * value / scale)) + "%"; }

  function finite(v) { return typeof v === "number" && v !== -1 ? v : 0; }

  function bar(f, scale) {
    const b = el("div", { class: "bar" });
    const allocated = finite(f.allocated), deserved = finite(f.deserved);
    const within = f.deserved === -1 ? allocated : Math.min(allocated, deserved);
    b.append(el("div", { class: "alloc", style: "width:" + pct(within, scale) }));
    if (f.borrowed > 0) b.append(el("div", { class: "borrowed", style: "left:" + pct(within, scale) + ";width:" + pct(f.borrowed, scale) }));
    if (finite(f.allocatedNonPreemptible) > 0) b.append(el("div", { class: "np", style: "width:" + pct(f.allocatedNonPreemptible, scale) }));
    if (f.deserved !== -1) b.append(el("div", { class: "mark deserved", title: "deserved " + shoal.num(f.deserved), style: "left:" + pct(deserved, scale) }));
    b.append(el("div", { class: "mark fair", title: "fair share " + shoal.num(f.fairShare), style: "left:" + pct(finite(f.fairShare), scale) }));
    if (f.limit === -1) b.append(el("span", { class: "unlimited" }, "no limit →"));
    else if (typeof f.limit === "number") b.append(el("div", { class: "mark limit", title: "limit " + (f.limitNote || f.limit), style: "left:" + pct(f.limit, scale) }));
    return b;
  }

  function scaleOf(roots, resource) {
    let top = 0;
    const walk = q => {
      const f = q.resources[resource] || {};
      for (const k of ["allocated", "deserved", "fairShare", "limit", "request"]) top = Math.max(top, finite(f[k]));
      q.children.forEach(walk);
    };
    roots.forEach(walk);
    return top || 1;
  }

  function rows(q, depth, resource, scale, out) {
    const f = q.resources[resource] || {};
    const badges = [];
    if (f.borrowed > 0) badges.push(el("span", { class: "badge borrow", title: "over quota: reclaimable by other queues" }, "borrowing " + shoal.amount(f.borrowed, resource)));
    if (finite(f.allocatedNonPreemptible) > 0) badges.push(el("span", { class: "badge np" }, "non-preemptible " + shoal.amount(f.allocatedNonPreemptible, resource)));
    if (typeof f.limit === "number" && f.limit !== -1 && finite(f.request) > f.limit) badges.push(el("span", { class: "badge over" }, "requests over limit"));
    const figs = "allocated " + shoal.amount(f.allocated, resource) + " · deserved " + shoal.amount(f.deserved, resource)
      + " · fair share " + shoal.amount(f.fairShare, resource) + " · requested " + shoal.amount(f.request, resource);
    out.push(el("tr", { class: "depth" + Math.min(depth, 3), "data-queue": q.name },
      el("td", { class: "qname" }, q.displayName || q.name, ...badges),
      el("td", { class: "barcell" }, f.allocated === undefined ? el("span", { class: "figs" }, "no figures yet") : bar(f, scale)),
      el("td", { class: "figs" }, figs),
      el("td", { class: "figs limit-note" }, f.limitNote || shoal.amount(f.limit, resource),
        f.quota !== undefined ? el("div", {}, "quota " + shoal.amount(f.quota, resource) + ", over-quota weight " + shoal.num(f.overQuotaWeight)) : null)));
    for (const child of q.children) rows(child, depth + 1, resource, scale, out);
  }

  function render() {
    const root = document.getElementById("queue-tree"), resource = document.getElementById("queue-resource").value;
    root.textContent = "";
    const shards = Object.keys(data.shards).sort();
    if (!shards.length) { root.append(el("p", { class: "empty" }, "No queues yet.")); return; }
    for (const shard of shards) {
      const s = data.shards[shard], out = [], scale = scaleOf(s.roots, resource);
      s.roots.forEach(q => rows(q, 0, resource, scale, out));
      root.append(el("div", { class: "shard", "data-shard": shard },
        el("h2", {}, shard ? "node pool " + shard : "queues (no fair-share figures published yet)",
          s.producedAt ? el("span", { class: "count" }, " — figures of revision " + s.revision) : null),
        el("table", { class: "tree" }, el("thead", {}, el("tr", {}, el("th", {}, "queue"), el("th", {}, resource + ": allocated / deserved / fair share / limit"),
          el("th", {}, "figures"), el("th", {}, "effective limit"))), el("tbody", {}, ...out))));
    }
  }

  shoal.queues = {
    async refresh() { data = await shoal.getJSON("v1/queue-tree"); render(); },
    init() { document.getElementById("queue-resource").addEventListener("change", () => data && render()); },
  };
})();

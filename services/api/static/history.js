// Over time: GPU allocation per queue (stacked areas) with capacity, and utilisation, from GET /v1/history (SVG).
"use strict";
(function () {
  const el = shoal.el, NS = "http://www.w3.org/2000/svg";
  const PAD = { l: 44, r: 12, t: 10, b: 22 };
  let W = 1000;  // the chart's width in pixels when drawn, so its text is not stretched

  function svg(tag, attrs) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    return node;
  }

  function axes(root, h, t0, t1, top, unit) {
    for (let i = 0; i <= 4; i++) {
      const y = PAD.t + (h - PAD.t - PAD.b) * (1 - i / 4);
      root.append(svg("line", { x1: PAD.l, x2: W - PAD.r, y1: y, y2: y, stroke: "#e3e6ec" }));
      const label = svg("text", { x: PAD.l - 6, y: y + 4, "text-anchor": "end" });
      label.textContent = Math.round(top * i / 4 * 10) / 10 + unit;
      root.append(label);
    }
    for (let i = 0; i <= 6; i++) {
      const t = t0 + (t1 - t0) * i / 6, x = PAD.l + (W - PAD.l - PAD.r) * i / 6;
      const label = svg("text", { x: x, y: h - 6, "text-anchor": i === 0 ? "start" : i === 6 ? "end" : "middle" });
      label.textContent = new Date(t * 1000).toTimeString().slice(0, t1 - t0 < 600 ? 8 : 5);
      root.append(label);
    }
  }

  function draw(samples) {
    const chart = document.getElementById("history-chart"), util = document.getElementById("util-chart");
    const legend = document.getElementById("history-legend");
    chart.textContent = ""; util.textContent = ""; legend.textContent = "";
    W = Math.max(400, chart.clientWidth - 12);
    if (samples.length < 2) {
      chart.append(el("p", { class: "empty" }, "Collecting samples… (one every few seconds; the chart needs two)"));
      return;
    }
    const t0 = samples[0].t, t1 = samples[samples.length - 1].t, H = 280, UH = 140;
    const totals = {};
    for (const s of samples) for (const [q, v] of Object.entries(s.queues)) totals[q] = (totals[q] || 0) + v;
    const queues = Object.keys(totals).sort((a, b) => totals[b] - totals[a] || a.localeCompare(b));
    const top = Math.max(1, ...samples.map(s => Math.max(s.capacity, s.allocated)));
    const x = t => PAD.l + (W - PAD.l - PAD.r) * (t1 === t0 ? 0 : (t - t0) / (t1 - t0));
    const y = (v, h, max) => PAD.t + (h - PAD.t - PAD.b) * (1 - v / max);
    const root = svg("svg", { viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none", id: "history-svg" });
    axes(root, H, t0, t1, top, "");
    const base = samples.map(() => 0);
    for (const q of queues) {
      const upper = samples.map((s, i) => base[i] + (s.queues[q] || 0));
      const pts = samples.map((s, i) => x(s.t) + "," + y(upper[i], H, top));
      const back = samples.map((s, i) => x(s.t) + "," + y(base[i], H, top)).reverse();
      const area = svg("polygon", { points: pts.concat(back).join(" "), fill: shoal.colour(q), "fill-opacity": "0.75",
        "data-queue": q });
      const title = svg("title");
      title.textContent = q + ": now " + shoal.num(samples[samples.length - 1].queues[q] || 0) + " GPUs";
      area.append(title);
      root.append(area);
      upper.forEach((v, i) => { base[i] = v; });
      legend.append(el("span", {}, el("i", { class: "bar-key", style: "background:" + shoal.colour(q) }), " " + q));
    }
    root.append(svg("polyline", { points: samples.map(s => x(s.t) + "," + y(s.capacity, H, top)).join(" "),
      fill: "none", stroke: "#c53030", "stroke-width": 2, "stroke-dasharray": "6 3", id: "capacity-line" }));
    legend.append(el("span", {}, el("i", { class: "bar-key limit" }), " GPU capacity"));
    chart.append(root);
    const u = svg("svg", { viewBox: "0 0 " + W + " " + UH, preserveAspectRatio: "none", id: "util-svg" });
    axes(u, UH, t0, t1, 100, "%");
    u.append(svg("polyline", { points: samples.map(s => x(s.t) + "," + y(s.capacity ? 100 * s.allocated / s.capacity : 0, UH, 100)).join(" "),
      fill: "none", stroke: "#2f6fdb", "stroke-width": 2, id: "util-line" }));
    util.append(el("div", { class: "figs" }, "cluster GPU utilisation (allocated ÷ capacity)"), u);
  }

  shoal.history = {
    async refresh() {
      const data = await shoal.getJSON("v1/history");
      document.getElementById("history-note").textContent = "GPU allocation per queue (stacked) and GPU capacity (dashed), "
        + "one sample every " + data.intervalS + " s, the last " + data.size + " samples ("
        + Math.round(data.size * data.intervalS / 60) + " min) kept by the api.";
      draw(data.samples);
    },
    init() {},
  };
})();

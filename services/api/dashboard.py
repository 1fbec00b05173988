"""The dashboard at `/`: the queues table (refreshed every 5 s from /v1/queues) and the last decisions (from
/v1/decisions/recent, then live over the SSE endpoint). Plain HTML and a little JavaScript, no framework."""

DASHBOARD = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Shoal</title>
<style>
 body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
 h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
 table { border-collapse: collapse; }
 th, td { padding: 2px 10px; text-align: right; border-bottom: 1px solid #ddd; }
 th:nth-child(-n+2), td:nth-child(-n+2) { text-align: left; }
 #decisions td { text-align: left; font-family: ui-monospace, monospace; font-size: 12px; }
 .unschedulable { color: #a60; } .evicted, .bind-failed { color: #b00; } .bound, .scheduled { color: #070; }
 #status { color: #777; font-size: 12px; }
</style>
</head>
<body>
<h1>Shoal</h1>
<div id="status">connecting…</div>
<h2>Queues</h2>
<table id="queues"><thead><tr><th>shard</th><th>queue</th><th>GPU deserved</th><th>GPU fair share</th>
<th>GPU allocated</th><th>GPU limit</th><th>GPU requested</th><th>CPU fair share</th><th>CPU allocated</th>
</tr></thead><tbody></tbody></table>
<h2>Last decisions</h2>
<table id="decisions"><thead><tr><th>time</th><th>kind</th><th>subject</th><th>what</th></tr></thead>
<tbody></tbody></table>
<script>
const MAX = 100;
const n = v => v === -1 ? "unlimited" : v;
function cell(tr, text) { const td = document.createElement("td"); td.textContent = text; tr.appendChild(td); }
async function queues() {
  try {
    const body = await (await fetch("v1/queues")).json();
    const tbody = document.querySelector("#queues tbody");
    tbody.textContent = "";
    for (const shard of Object.keys(body.shards).sort()) {
      const qs = body.shards[shard].queues;
      for (const name of Object.keys(qs).sort()) {
        const g = qs[name].gpu, c = qs[name].cpu, tr = document.createElement("tr");
        [shard, name, n(g.deserved), n(g.fairShare), n(g.allocated), n(g.limit), n(g.request),
         n(c.fairShare), n(c.allocated)].forEach(v => cell(tr, v));
        tbody.appendChild(tr);
      }
    }
  } catch (e) { document.getElementById("status").textContent = "queues: " + e; }
}
function what(e) {
  const d = e.data || {}, kind = e.type.split(".").pop();
  if (kind === "unschedulable") return d.message || "";
  if (kind === "evicted") return "[" + d.action + "] by " + d.by + ": " + (d.message || "");
  if (kind === "bind-failed") return "-> " + d.node + ": " + d.error;
  return "-> " + (d.node || "?");
}
function add(e) {
  const tbody = document.querySelector("#decisions tbody"), tr = document.createElement("tr");
  const kind = e.type.split(".").pop();
  tr.className = kind;
  [(e.time || "").slice(11, 23), kind, e.subject, what(e)].forEach(v => cell(tr, v));
  tbody.insertBefore(tr, tbody.firstChild);
  while (tbody.children.length > MAX) tbody.removeChild(tbody.lastChild);
}
async function start() {
  try {
    const body = await (await fetch("v1/decisions/recent?limit=" + MAX)).json();
    body.decisions.forEach(add);
  } catch (e) { /* the live stream still fills the table */ }
  const source = new EventSource("v1/decisions");
  const status = document.getElementById("status");
  source.onopen = () => { status.textContent = "live"; };
  source.onerror = () => { status.textContent = "reconnecting…"; };
  source.addEventListener("decision", m => add(JSON.parse(m.data)));
}
queues(); setInterval(queues, 5000); start();
</script>
</body>
</html>
"""

// Tabs and the refresh loop: the open tab every 3 s (the summary bar's sources too), the chart every 10 s.
"use strict";
(function () {
  const parts = { gpus: shoal.gpuMap, queues: shoal.queues, workloads: shoal.workloads, history: shoal.history };

  async function refresh(tab) {
    const part = parts[tab];
    if (!part) return;
    try {
      await part.refresh();
      shoal.state.refreshed = (shoal.state.refreshed || 0) + 1;
      shoal.state["refreshed_" + tab] = Date.now();
    } catch (e) { shoal.fail(tab, e); }
  }

  function open(tab) {
    shoal.state.tab = tab;
    document.querySelectorAll("#tabs button").forEach(b => b.classList.toggle("active", b.dataset.tab === tab));
    document.querySelectorAll(".tab").forEach(s => s.classList.toggle("active", s.id === "tab-" + tab));
    if (location.hash !== "#" + tab) history.replaceState(null, "", "#" + tab);
    if (tab === "gpus") shoal.gpuMap.render();
    refresh(tab);
  }

  shoal.open = open;
  const tokenField = document.getElementById("token");
  tokenField.value = shoal.token();
  document.getElementById("token-form").addEventListener("submit", e => {
    e.preventDefault();
    shoal.setToken(tokenField.value.trim());
    location.reload();  // every view and the stream again, with the new token
  });
  Object.values(parts).forEach(p => p.init());
  shoal.stream.init();
  document.querySelectorAll("#tabs button").forEach(b => b.addEventListener("click", () => open(b.dataset.tab)));
  document.getElementById("detail-close").addEventListener("click", shoal.closeDetail);
  document.addEventListener("keydown", e => { if (e.key === "Escape") shoal.closeDetail(); });
  const first = (location.hash || "#gpus").slice(1);
  open(parts[first] || first === "decisions" ? first : "gpus");
  if (shoal.state.tab !== "gpus") refresh("gpus");   // the summary bar
  if (shoal.state.tab !== "workloads") refresh("workloads");
  shoal.stream.start();
  setInterval(() => {
    const tab = shoal.state.tab;
    refresh(tab);
    if (tab !== "gpus") refresh("gpus");
    if (tab !== "workloads") refresh("workloads");
  }, 3000);
  setInterval(() => { if (shoal.state.tab === "history") refresh("history"); }, 10000);
})();

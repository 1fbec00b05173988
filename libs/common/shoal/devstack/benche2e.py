"""End-to-end scheduling benchmark on the real stack (SPEC §6), method in docs/benchmarks-e2e.md.

Per repetition, in an order that alternates between repetitions (bench_stats.alternate):
- `backlog` for each scheduler (bench_contenders: Shoal's services, kube-scheduler at its defaults,
  kube-scheduler with 5000/5000 client limits): a mix of gangs, whole GPUs and fractions made while it is
  stopped, then it starts; launch → ready, launch → last bound and first → last bound drain rates;
- `bind-ceiling`: the same pods bound by the benchmark itself, 64 bindings in flight: the apiserver's limit;
- `kai-writes`: the same pods given by the benchmark itself every write KAI's model asks of a scheduler (their
  PodGroups, reservation pods, GPU ConfigMaps, pod patches, bindings, events; bench_kai_writes), 64 pods in
  flight: the apiserver's limit for any KAI-compatible scheduler;
- `steady` for each rate and scheduler: pods arriving open loop; create → bound p50/p90/p99.
Every phase has its own namespace, queue, fake nodes, scheduler processes and watcher process, and leaves
none of them behind. Records carry CPU seconds per component and the load average; the summary is medians.

    result = await run(stack_info, pods=1000, rates=(10, 50), duration_s=60, repeat=5)
    print(table(result))
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from shoal.adapters import kube as k
from shoal.devstack import bench_phases as phases
from shoal.devstack.bench_contenders import SCHEDULERS, SHOAL_SERVICES
from shoal.devstack.bench_stats import alternate, summarise, table

BIND_CEILING = "apiserver-bind"
KAI_CEILING = "apiserver-kai-writes"
CEILINGS = {BIND_CEILING: "bind-ceiling", KAI_CEILING: "kai-writes"}  # contender → its phase's kind
__all__ = ["BIND_CEILING", "CEILINGS", "KAI_CEILING", "SCHEDULERS", "SHOAL_SERVICES", "run", "table"]


def plan(schedulers: Sequence[str], rates: Sequence[float], repeat: int,
         bind_ceiling: bool = True) -> list[tuple[int, str, str, float]]:
    """Every phase of a run in order: (repetition, kind, scheduler, rate); pure."""
    out: list[tuple[int, str, str, float]] = []
    contenders = [*schedulers, *CEILINGS] if bind_ceiling else list(schedulers)
    for rep in range(repeat):
        order = alternate(contenders, rep)
        out += [(rep, CEILINGS.get(s, "backlog"), s, 0.0) for s in order]
        for pods_per_s in rates:
            out += [(rep, "steady", s, float(pods_per_s)) for s in order if s not in CEILINGS]
    return out


async def run(info: Any, *, pods: int = 1000, rates: Sequence[float] = (10, 50), duration_s: float = 60.0,
              repeat: int = 1, schedulers: Sequence[str] = SCHEDULERS, nodes: int = 0, gpus: int = 8,
              timeout_s: float = 300.0, bind_ceiling: bool = True,
              progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    from kubernetes_asyncio import client, config

    from shoal.devstack.scheduler import install_base

    unknown = [s for s in schedulers if s not in SCHEDULERS]
    if unknown:
        raise ValueError(f"unknown scheduler(s) {unknown}; choose from {', '.join(SCHEDULERS)}")
    run_tag = f"be{uuid.uuid4().hex[:6]}"
    state = Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    await install_base(info.kubeconfig)
    cfg = client.Configuration()
    await config.load_kube_config(config_file=info.kubeconfig, client_configuration=cfg)
    api = client.ApiClient(cfg)
    api.user_agent = k.user_agent("bench")
    k.skip_proxy_lookup(api)
    bench = phases.Bench(info=info, api=api, kube=k.Kube(api), state_dir=state, run_tag=run_tag,
                         timeout_s=timeout_s, gpus_per_node=gpus, nodes=nodes)
    records: list[dict[str, Any]] = []
    load_before = [round(x, 2) for x in os.getloadavg()]
    position: dict[Any, int] = {}
    try:
        for rep, kind, scheduler, pods_per_s in plan(schedulers, rates, repeat, bind_ceiling):
            if kind == "bind-ceiling":
                record = await phases.bind_ceiling(bench, pods)
            elif kind == "kai-writes":
                record = await phases.kai_writes_ceiling(bench, pods)
            elif kind == "backlog":
                record = await phases.backlog(bench, scheduler, pods)
            else:
                record = await phases.steady(bench, scheduler, pods_per_s, duration_s)
            slot = (rep, kind, pods_per_s)
            record.update(repetition=rep, position=position.get(slot, 0))
            position[slot] = position.get(slot, 0) + 1
            records.append(record)
            if progress is not None:
                progress(record)
    finally:
        await api.close()
    return {"run_tag": run_tag, "state_dir": str(state), "pods": pods, "rates": list(rates),
            "duration_s": duration_s, "repeat": repeat, "schedulers": list(schedulers),
            "load_average": {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]},
            "records": records, "summary": summarise(records), "leftovers": bench.leftovers}

"""What `shoal bench core` measures and prints, for its generated clusters and for manifest files (e.g.
the shared generator's `--format json` clusters): per cycle the snapshot build, every action's time, binds
and pipelined pods, and per eviction action its evictions, the pods its evictors got placed / pipelined,
evictions per pipelined pod, the victim-search counters, and how many evictions break SPEC §4 "only
needed victims" (core/audit.py; must be 0).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from shoal.core.audit import eviction_figures, unneeded_evictions
from shoal.core.cycle import run_cycle_timed
from shoal.core.model import Snapshot
from shoal.core.plan import Bind, Evict, Pipeline

EVICTING = ("consolidation", "reclaim", "preempt")


def load_snapshot(path: str, now: str) -> Snapshot:
    """A manifest file or directory as `shoal simulate` reads it, as its first cycle's snapshot at `now`."""
    from shoal.cli.manifests import load_documents
    from shoal.cli.simulation import first_snapshot

    docs, _ = load_documents([path])
    got = first_snapshot(docs, now)
    if got.problems:
        raise ValueError(f"{path}: {got.problems[0].message}")
    return got.snapshot


def measure(label: str, snap: Snapshot, repeat: int, clock: Callable[[], float]) -> dict:
    """Run the cycle `repeat` times on `snap`; the best run's timings and the plan's figures."""
    runs = []
    plan = None
    for _ in range(max(repeat, 1)):
        plan, t = run_cycle_timed(snap, clock)
        runs.append(t)
    assert plan is not None
    best = min(runs, key=lambda t: t.total_duration_ms)
    figures = eviction_figures(plan)
    actions = {}
    for name in EVICTING:
        row: dict[str, Any] = dict(figures.get(name, {"evictions": 0, "placed": 0, "pipelined": 0}))
        row["ms"] = best.action_durations_ms.get(name, 0.0)
        row["evictions_per_pipelined"] = round(row["evictions"] / row["pipelined"], 3) if row["pipelined"] else None
        row["counters"] = {k.split(".", 1)[1]: v for k, v in best.counters.items() if k.startswith(name + ".")}
        actions[name] = row
    evictions = len(plan.of(Evict))
    pipelined = len(plan.of(Pipeline))
    return {
        "cluster": label,
        "nodes": len(snap.nodes),
        "pods": len(snap.pods),
        "pending": sum(1 for p in snap.pods if p.node_name is None),
        "snapshot_build_ms": best.snapshot_build_ms,
        "action_durations_ms": best.action_durations_ms,
        "total_duration_ms": best.total_duration_ms,
        "median_total_ms": round(statistics.median(t.total_duration_ms for t in runs), 3),
        "binds": len(plan.of(Bind)),
        "pipelined": pipelined,
        "evictions": evictions,
        "evictions_per_pipelined": round(evictions / pipelined, 3) if pipelined else None,
        "unneeded_evictions": len(unneeded_evictions(snap, plan)),
        "actions": actions,
    }


def table(rows: list[dict]) -> str:
    head = (f"{'cluster':>12} {'nodes':>6} {'pods':>8} {'pending':>7} {'build ms':>9} {'allocate ms':>11} "
            f"{'other ms':>8} {'total ms':>9} {'median':>9} {'binds':>6} {'pipelined':>9} {'evictions':>9} "
            f"{'ev/pipe':>7} {'unneeded':>8}")
    lines = [head]
    for r in rows:
        acts = r["action_durations_ms"]
        other = sum(v for k, v in acts.items() if k != "allocate")
        ratio = "-" if r["evictions_per_pipelined"] is None else f"{r['evictions_per_pipelined']:.2f}"
        lines.append(
            f"{r['cluster']:>12} {r['nodes']:>6} {r['pods']:>8} {r['pending']:>7} {r['snapshot_build_ms']:>9.1f} "
            f"{acts.get('allocate', 0.0):>11.1f} {other:>8.1f} {r['total_duration_ms']:>9.1f} "
            f"{r['median_total_ms']:>9.1f} {r['binds']:>6} {r['pipelined']:>9} {r['evictions']:>9} {ratio:>7} "
            f"{r['unneeded_evictions']:>8}")
        for name, a in r["actions"].items():
            ratio = "-" if a["evictions_per_pipelined"] is None else f"{a['evictions_per_pipelined']:.2f}"
            counters = " ".join(f"{k}={v}" for k, v in sorted(a["counters"].items()))
            lines.append(f"{'':>12}   {name:<13} {a['ms']:>8.1f} ms  evictions {a['evictions']:>5}  placed "
                         f"{a['placed']:>5}  pipelined {a['pipelined']:>5}  ev/pipe {ratio:>5}  {counters}".rstrip())
    return "\n".join(lines) + "\n"

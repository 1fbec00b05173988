"""The arithmetic and the report of `shoal bench e2e` (pure): percentiles, medians over repetitions, the order
the contenders run in, and the table.

    alternate(["a", "b", "c"], 1)   # ["c", "b", "a"]: every repetition changes who goes first and who follows whom
    summarise(records)              # one row per (phase, scheduler, rate): the median of every figure
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank `q` quantile (0 ≤ q ≤ 1) of `values`; 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))])


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def alternate(names: Sequence[str], repetition: int) -> list[str]:
    """The order of repetition `repetition` (0-based): rotated by one every second repetition, reversed on the
    odd ones, so each contender leads and each pair meets in both orders as repetitions go on."""
    if not names:
        return []
    shift = (repetition // 2) % len(names)
    order = list(names[shift:]) + list(names[:shift])
    return order[::-1] if repetition % 2 else order


def latency_figures(latencies_ms: Sequence[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(latencies_ms, 0.50), 1), "p90_ms": round(percentile(latencies_ms, 0.90), 1),
            "p99_ms": round(percentile(latencies_ms, 0.99), 1), "max_ms": round(max(latencies_ms, default=0.0), 1)}


def figures_by_kind(plans: Sequence[Any], latencies_ms: dict[str, float]) -> dict[str, float]:
    """p50 and p99 per kind of pod (`gang_p99_ms`, …): a gang member waits for the rest of its gang, which
    arrives over (size − 1) / rate seconds, so the mix's p99 is mostly the gangs' and says little of the rest."""
    out: dict[str, float] = {}
    for kind in sorted({p.kind for p in plans}):
        values = [latencies_ms[p.name] for p in plans if p.kind == kind and p.name in latencies_ms]
        if values:
            out[f"{kind}_p50_ms"] = round(percentile(values, 0.50), 1)
            out[f"{kind}_p99_ms"] = round(percentile(values, 0.99), 1)
    return out


def ready_latencies(plans: Sequence[Any], created: dict[str, float], bound: dict[str, float]) -> dict[str, float]:
    """Ready → bound per bound pod, ms: a pod is ready when it is created, a gang member when the last member
    of its gang is (before that no gang scheduler may bind it). What the scheduler adds, apart from the wait a
    gang's arrival imposes by construction. kube-scheduler has no gangs: its phase reports create → bound."""
    ready = dict(created)
    groups: dict[str, list[str]] = {}
    for plan in plans:
        if plan.group and plan.name in created:
            groups.setdefault(plan.group, []).append(plan.name)
    for members in groups.values():
        last = max(created[n] for n in members)
        for name in members:
            ready[name] = last
    return {n: (bound[n] - t) * 1000 for n, t in ready.items() if n in bound}


def ready_figures(latencies_ms: Sequence[float]) -> dict[str, float]:
    return {f"ready_{k}": v for k, v in latency_figures(latencies_ms).items()}


def rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else 0.0


def phase_key(record: dict[str, Any]) -> tuple[str, str, float]:
    return record["kind"], record["scheduler"], float(record.get("rate") or 0)


def summarise(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (kind, scheduler, rate) in first-seen order: the median of each figure over repetitions,
    the median load average and the median CPU seconds per component."""
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(phase_key(record), []).append(record)
    rows = []
    for (kind, scheduler, rate_), members in groups.items():
        figures = sorted({name for m in members for name in m["figures"]})
        components = sorted({name for m in members for name in m.get("cpu_s") or {}})
        rows.append({
            "kind": kind, "scheduler": scheduler, "rate": rate_ or None, "repetitions": len(members),
            "pods": median([m["pods"] for m in members]),
            "figures": {f: round(median([m["figures"][f] for m in members if f in m["figures"]]), 3)
                        for f in figures},
            "load_average": round(median([m["load_before"][0] for m in members]), 2),
            "cpu_s": {c: round(median([(m.get("cpu_s") or {}).get(c, 0.0) for m in members]), 2)
                      for c in components},
            "peak_rss_mb": {c: max((m.get("peak_rss_mb") or {}).get(c, 0.0) for m in members)
                            for c in sorted({n for m in members for n in m.get("peak_rss_mb") or {}})},
        })
    return rows


COLUMNS = {
    "backlog": ("startup_s", "first_bound_s", "last_bound_s", "drain_from_launch_pods_per_s",
                "drain_bound_pods_per_s", "p50_ms", "p99_ms"),
    "bind-ceiling": ("post_pods_per_s", "seen_pods_per_s", "post_p50_ms", "post_p99_ms"),
    "kai-writes": ("post_pods_per_s", "seen_pods_per_s", "post_p50_ms", "post_p99_ms"),
    "steady": ("achieved_rate", "p50_ms", "p90_ms", "p99_ms", "max_ms", "ready_p50_ms", "ready_p99_ms",
               "whole_p50_ms", "whole_p99_ms", "fraction_p99_ms", "gang_p99_ms"),
}
SHORT = {"startup_s": "start s", "first_bound_s": "1st s", "last_bound_s": "last s",
         "drain_from_launch_pods_per_s": "launch→last/s", "drain_bound_pods_per_s": "1st→last/s",
         "post_pods_per_s": "posts/s", "seen_pods_per_s": "seen/s", "post_p50_ms": "post p50",
         "post_p99_ms": "post p99", "achieved_rate": "created/s", "ready_p50_ms": "ready p50",
         "ready_p99_ms": "ready p99", "whole_p50_ms": "whole p50",
         "whole_p99_ms": "whole p99", "fraction_p99_ms": "fraction p99", "gang_p99_ms": "gang p99"}


def table(result: dict[str, Any]) -> str:
    """The medians as text: one block per phase kind (with the median 1-minute load average before each phase),
    then CPU seconds per component and the load average over the run."""
    rows = result["summary"]
    out = [f"shoal bench e2e: {result['pods']} pods backlog, rates {result['rates']} pods/s for "
           f"{result['duration_s']} s, {result['repeat']} repetition(s), medians"]
    for kind, columns in COLUMNS.items():
        members = [r for r in rows if r["kind"] == kind]
        if not members:
            continue
        out.append("")
        out.append(f"{kind:<26}{'rate':>6}" + "".join(f"{SHORT.get(c, c):>15}" for c in columns) + f"{'load':>7}")
        for r in members:
            cells = "".join(f"{r['figures'].get(c, ''):>15}" for c in columns)
            out.append(f"{r['scheduler']:<26}{(r['rate'] or ''):>6}{cells}{r['load_average']:>7}")
    out.append("")
    for r in rows:
        if r["cpu_s"]:
            cpu = ", ".join(f"{c}={v}" for c, v in r["cpu_s"].items())
            out.append(f"cpu s {r['kind']} {r['scheduler']}{' @' + str(r['rate']) if r['rate'] else ''}: {cpu}")
        if r.get("peak_rss_mb"):
            rss = ", ".join(f"{c}={v}" for c, v in r["peak_rss_mb"].items())
            out.append(f"peak RSS MiB {r['kind']} {r['scheduler']}{' @' + str(r['rate']) if r['rate'] else ''}: {rss}")
    out.append(f"load average: {result['load_average']['before']} before, {result['load_average']['after']} after")
    return "\n".join(out) + "\n"

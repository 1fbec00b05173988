"""The soak's verdict: every check with what broke it, the figures and the sampled series; and its table.

    result = judge(soak, final=..., drained=..., lag_final=..., decisions=..., leftovers=..., ...)
    result["passed"], result["failed"]       # False / ["rss-flat", ...] when a check failed
    print(table(result))

A check is `ok` (held), `failed` (its problems listed) or `skipped` (too few samples to judge: a short run).
"Flat": of the samples after the warm-up, the median of the last third is at most (1 + tolerance) × the median
of the second third plus a slack; a process restarted by a fault, or a Redis emptied by one, starts a new series
and only the longest series is judged. Redis keys that expire within an hour are bounded by their rate times
their TTL (soak_sample.SHORT_TTL_S), so only the lasting ones (no TTL, or a longer one) are judged flat; the total
is reported.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from shoal.devstack.soak_checks import flatness, lag_problems, longest_run, rebound

RSS_TOLERANCE, RSS_SLACK_MB = 0.15, 8.0
KEYS_TOLERANCE, KEYS_SLACK = 0.25, 200
LAG_BOUND, LAG_FINAL_BOUND = 1000, 50  # messages per consumer group: while faults hit, and once settled
RECOVERY_S = 180.0  # a fault is recovered once a pod is bound again within this long after it


def _check(problems: list[str], *, skipped: bool = False, **detail: Any) -> dict[str, Any]:
    status = "failed" if problems else ("skipped" if skipped else "ok")
    return {"status": status, "problems": problems[:50], "count": len(problems), **detail}


def _faults(soak: Any) -> tuple[list[dict[str, Any]], list[str]]:
    binds = sorted(t - soak.started for t in soak.tracker.bound_at.values())
    problems = list(soak.problems.get("faults-recovered", []))
    for fault in soak.faults:
        if "error" in fault:
            continue
        after = [b for b in binds if b >= fault["ready_t"]]
        fault["first_bind_after_s"] = round(after[0] - fault["ready_t"], 1) if after else None
        if fault["first_bind_after_s"] is None or fault["first_bind_after_s"] > RECOVERY_S:
            problems.append(f"{fault['kind']} {fault.get('target')} at t={fault['t']}s: no pod bound within "
                            f"{RECOVERY_S:.0f}s after it was ready again")
    return soak.faults, problems


def series(soak: Any) -> dict[str, Any]:
    rss: dict[str, list[tuple[float, float, int]]] = {}
    keys: list[tuple[float, float, int]] = []
    lag: list[dict[str, int]] = []
    for point in soak.samples:
        for name, mb in point["rss_mb"].items():
            rss.setdefault(name, []).append((point["t"], mb, point["pids"].get(name, 0)))
        if point.get("redis"):
            keys.append((point["t"], point["redis"]["lasting"], point["redis_pid"]))
        if point.get("lag") is not None:
            lag.append(point["lag"])
    return {"rss": rss, "keys": keys, "lag": lag}


def judge(soak: Any, *, final: dict, drained: dict, lag_final: dict[str, int], decisions: list[dict],
          leftovers: list[str], load_before: list[float], state_dir: str) -> dict[str, Any]:
    import os

    o = soak.opts
    s = series(soak)
    warm = o.warmup_s
    rss_flat = {name: flatness(longest_run(points), warmup_s=warm, tolerance=RSS_TOLERANCE, slack=RSS_SLACK_MB)
                for name, points in s["rss"].items()}
    keys_flat = flatness(longest_run(s["keys"]), warmup_s=warm, tolerance=KEYS_TOLERANCE, slack=KEYS_SLACK)
    kinds = Counter(str(d.get("type", "")).rsplit(".", 1)[-1] for d in decisions)
    evictions = Counter((d.get("data") or {}).get("action", "?") for d in decisions
                        if str(d.get("type", "")).endswith(".evicted"))
    fault_records, fault_problems = _faults(soak)
    checks = {
        "bound-once": _check(rebound(soak.tracker.nodes_by_uid), pods_seen_bound=len(soak.tracker.nodes_by_uid)),
        "pending-has-reason": _check(final.get("pending_without_reason", ["the cluster never settled"])),
        "no-overcommit": _check(soak.problems.get("no-overcommit", []) + final.get("overcommitted", []),
                                samples=sum(1 for p in soak.samples if "overcommitted" in p) + 1),
        "no-orphan-reservation": _check(final.get("orphan_reservations", []) + drained.get("reservations", [])
                                        + [f"left after the drain: {x}" for x in leftovers]),
        "no-orphan-lease": _check([f"after the settle: {x}" for x in final.get("leases", [])]
                                  + [f"after the drain: {x}" for x in drained.get("leases", [])]),
        "drained": _check([f"pod {p} still there" for p in drained.get("pods", [])]),
        "rss-flat": _check([f"{n}: last third {f['last_third']} MiB > {f['bound']} MiB" for n, f in rss_flat.items()
                            if f["flat"] is False], skipped=all(f["flat"] is None for f in rss_flat.values()),
                           per_service=rss_flat),
        "redis-keys-flat": _check([f"lasting keys: last third {keys_flat['last_third']} > {keys_flat['bound']}"]
                                  if keys_flat["flat"] is False else [], skipped=keys_flat["flat"] is None,
                                  **keys_flat),
        "kafka-lag-bounded": _check(lag_problems(s["lag"], lag_final, bound=LAG_BOUND, final_bound=LAG_FINAL_BOUND),
                                    skipped=not s["lag"], final=lag_final),
        "faults-recovered": _check(fault_problems, injected=len(fault_records)),
        "reclaim-happened": _check([] if evictions.get("reclaim") else ["no reclaim eviction on the decision stream"],
                                   evictions=evictions.get("reclaim", 0)),
        "preempt-happened": _check([] if evictions.get("preempt") else ["no preempt eviction on the decision stream"],
                                   evictions=evictions.get("preempt", 0)),
        "services-alive": _check(soak.problems.get("services-alive", [])),
        "jobs-handled": _check(soak.problems.get("jobs-submitted", []) + soak.problems.get("jobs-finished", [])),
    }
    failed = [name for name, c in checks.items() if c["status"] == "failed"]
    jobs = list(soak.jobs.values())
    loads = [p["load"] for p in soak.samples]
    return {
        "tag": soak.tag, "minutes": o.minutes, "seed": o.seed, "nodes": o.nodes, "gpus_per_node": o.gpus,
        "passed": not failed, "failed": failed, "checks": checks,
        "jobs": {"submitted": len(jobs), "by_kind": dict(Counter(j.kind for j in jobs)),
                 "by_queue": dict(Counter(j.queue for j in jobs)), "by_priority": dict(Counter(j.priority for j in jobs)),
                 "outcomes": dict(Counter(j.outcome or "running" if j.running_at else j.outcome or "waiting"
                                          for j in jobs)),
                 "pods": sum(len(j.pods) for j in jobs), "pods_bound": len(soak.tracker.bound_at)},
        "decisions": dict(kinds), "evictions": dict(evictions),
        "faults": fault_records, "service_restarts": soak.services.restarts,
        "settle": {k: v for k, v in final.items() if k in ("settle_s", "pods", "bound")},
        "drain_s": drained.get("drain_s"), "watch_relists": soak.tracker.relists,
        "load_average": {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()],
                         "sampled_min": min(loads, default=0), "sampled_max": max(loads, default=0),
                         "sampled_median": sorted(loads)[len(loads) // 2] if loads else 0},
        "series": {"t": [p["t"] for p in soak.samples], "rss_mb": {n: [v for _t, v, _p in pts] for n, pts in
                                                                    s["rss"].items()},
                   "redis_keys": [(p.get("redis") or {}).get("total") for p in soak.samples],
                   "redis_keys_lasting": [(p.get("redis") or {}).get("lasting") for p in soak.samples],
                   "redis_by_kind": [(p.get("redis") or {}).get("by_kind") for p in soak.samples],
                   "lag": [p.get("lag") for p in soak.samples], "load": loads,
                   "jobs_running": [p["jobs_running"] for p in soak.samples],
                   "jobs_waiting": [p["jobs_waiting"] for p in soak.samples]},
        "state_dir": state_dir,
    }


def _every(values: list[Any], n: int = 8) -> list[Any]:
    """About `n` values spread over the list, the last one included."""
    if len(values) <= n:
        return values
    step = len(values) / n
    return [values[int(i * step)] for i in range(n - 1)] + [values[-1]]


def table(result: dict[str, Any]) -> str:
    j = result["jobs"]
    lines = [f"shoal bench soak: {result['minutes']:g} min, {result['nodes']} nodes x {result['gpus_per_node']} GPUs, "
             f"seed {result['seed']} ({result['tag']})",
             f"jobs {j['submitted']} ({', '.join(f'{k} {v}' for k, v in sorted(j['by_kind'].items()))}); "
             f"pods {j['pods']}, bound {j['pods_bound']}; outcomes "
             f"{', '.join(f'{k} {v}' for k, v in sorted(j['outcomes'].items()))}",
             f"decisions {', '.join(f'{k} {v}' for k, v in sorted(result['decisions'].items()))}; evictions "
             f"{', '.join(f'{k} {v}' for k, v in sorted(result['evictions'].items())) or 'none'}",
             f"load average: before {result['load_average']['before'][0]}, sampled median "
             f"{result['load_average']['sampled_median']} (max {result['load_average']['sampled_max']})", "",
             f"{'fault':<10} {'target':<24} {'at s':>7} {'down s':>7} {'bind after s':>13}"]
    for f in result["faults"]:
        lines.append(f"{f['kind']:<10} {str(f.get('target', '-')):<24} {f.get('t', 0):>7} "
                     f"{f.get('down_s', '-')!s:>7} {f.get('first_bind_after_s', f.get('error', '-'))!s:>13}")
    t = result["series"]["t"]
    lines += ["", "t s         " + " ".join(f"{x:>7.0f}" for x in _every(t))]
    for name, values in result["series"]["rss_mb"].items():
        lines.append(f"{name[:11]:<11} " + " ".join(f"{v:>7.1f}" for v in _every(values)))
    lines.append("redis keys  " + " ".join(f"{v if v is not None else '-':>7}" for v in
                                          _every(result["series"]["redis_keys"])))
    lines.append("  lasting   " + " ".join(f"{v if v is not None else '-':>7}" for v in
                                          _every(result["series"]["redis_keys_lasting"])))
    lag = [sum(x.values()) if x else None for x in result["series"]["lag"]]
    lines.append("kafka lag   " + " ".join(f"{v if v is not None else '-':>7}" for v in _every(lag)))
    lines += ["", f"{'check':<24} {'status':<8} detail"]
    for name, check in result["checks"].items():
        detail = "; ".join(check["problems"][:3]) + (f" (+{check['count'] - 3} more)" if check["count"] > 3 else "")
        lines.append(f"{name:<24} {check['status']:<8} {detail}")
    lines.append("")
    lines.append("PASSED" if result["passed"] else f"FAILED: {', '.join(result['failed'])}")
    return "\n".join(lines) + "\n"

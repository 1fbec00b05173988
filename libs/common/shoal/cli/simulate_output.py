"""Rendering a simulation as the SPEC §5 JSON object, a table, or the timings list.

Units in queue figures: gpu in GPUs (milli-GPU / 1000, 0.5 allowed), cpu in millicores, memory in
bytes; -1 (unlimited) is printed as -1 in every unit.
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal.cli.simulation import SimulationResult
from shoal.core.audit import eviction_figures
from shoal.core.ingest.grouping import POD_GROUP_ANNOTATION
from shoal.core.plan import Bind, Evict, Pipeline, Plan, SetCondition

RESOURCES = ("gpu", "cpu", "memory")


def gpus(milli: int) -> int | float:
    if milli == -1:
        return -1
    return milli // 1000 if milli % 1000 == 0 else milli / 1000


def _figure(resource: str, value: int) -> int | float:
    return gpus(value) if resource == "gpu" else value


def _fraction(text: str | None) -> float | None:
    return None if text is None else float(text)


def queues_json(plan: Plan) -> dict:
    out = {}
    for queue in sorted(plan.queues, key=lambda q: q.name):
        entry = {}
        for resource in RESOURCES:
            fig = getattr(queue, resource)
            entry[resource] = {
                "deserved": _figure(resource, fig.deserved),
                "fairShare": _figure(resource, fig.fair_share),
                "allocated": _figure(resource, fig.allocated),
                "limit": _figure(resource, fig.limit),
            }
        out[queue.name] = entry
    return out


def cycle_json(cycle: int, plan: Plan) -> dict:
    binds = sorted(plan.of(Bind), key=lambda b: b.pod)
    pipelined = sorted(plan.of(Pipeline), key=lambda p: p.pod)
    evictions = sorted(plan.of(Evict), key=lambda e: (e.pod, e.action))
    conditions = sorted(plan.of(SetCondition), key=lambda c: c.pod_group)
    return {
        "cycle": cycle,
        "binds": [{"pod": b.pod, "node": b.node, "gpuGroups": list(b.gpu_groups), "fraction": _fraction(b.fraction)}
                  for b in binds],
        "pipelined": [{"pod": p.pod, "node": p.node} for p in pipelined],
        "evictions": [{"pod": e.pod, "action": e.action, "by": e.by, "message": e.message} for e in evictions],
        "unschedulable": [{"podGroup": c.pod_group, "reason": c.reason, "message": c.message} for c in conditions],
        "queues": queues_json(plan),
    }


def _key(doc: Mapping) -> str:
    meta = doc.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def final_json(documents: list[dict]) -> dict:
    pods: dict[str, dict] = {}
    groups: dict[str, dict] = {}
    core: dict[str, list[str]] = {}  # semi-preemptible groups: status.schedulingState.corePods
    for doc in documents:
        if isinstance(doc, dict) and doc.get("kind") == "PodGroup":
            groups[_key(doc)] = {"running": 0, "pending": 0, "pipelined": 0}
            if (doc.get("spec") or {}).get("preemptibility") == "semi-preemptible":
                state = (doc.get("status") or {}).get("schedulingState") or {}
                core[_key(doc)] = list(state.get("corePods") or [])
    for doc in documents:
        if not isinstance(doc, dict) or doc.get("kind") != "Pod":
            continue
        spec, status = doc.get("spec") or {}, doc.get("status") or {}
        node = spec.get("nodeName") or None
        phase = status.get("phase") or ("Running" if node else "Pending")
        nominated = status.get("nominatedNodeName") or None
        key = _key(doc)
        pods[key] = {"node": node, "phase": phase, "nominatedNode": nominated}
        group = ((doc.get("metadata") or {}).get("annotations") or {}).get(POD_GROUP_ANNOTATION)
        if not group:
            continue
        counts = groups.setdefault(f"{key.split('/', 1)[0]}/{group}", {"running": 0, "pending": 0, "pipelined": 0})
        if node and phase == "Running":
            counts["running"] += 1
        elif phase == "Pending" and nominated:
            counts["pipelined"] += 1
        elif phase == "Pending":
            counts["pending"] += 1
    for key, names in core.items():
        groups[key]["corePods"] = names
    return {"pods": {k: pods[k] for k in sorted(pods)}, "podGroups": {k: groups[k] for k in sorted(groups)}}


def render_json(result: SimulationResult) -> dict:
    return {"cycles": [cycle_json(c.cycle, c.plan) for c in result.cycles], "final": final_json(result.documents)}


def timings_json(result: SimulationResult) -> list[dict]:
    """Per cycle: SPEC §5's timings, plus per eviction action its evictions, the pods its evictors got
    placed and pipelined, and the victim-search counters."""
    return [{"cycle": c.cycle, "snapshot_build_ms": round(c.snapshot_build_ms, 3),
             "total_duration_ms": round(c.total_duration_ms, 3),
             "action_durations_ms": {k: round(v, 3) for k, v in sorted(c.action_durations_ms.items())},
             "evictions": eviction_figures(c.plan),
             "counters": dict(sorted(c.counters.items()))}
            for c in result.cycles]


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines) + "\n"


def render_table(result: SimulationResult) -> str:
    data = render_json(result)
    parts = []
    for cycle in data["cycles"]:
        parts.append(f"== cycle {cycle['cycle']} ==\n")
        rows = [["bind", b["pod"], b["node"], ",".join(b["gpuGroups"]) + (f" ({b['fraction']})" if b["fraction"] else "")]
                for b in cycle["binds"]]
        rows += [["pipeline", p["pod"], p["node"], ""] for p in cycle["pipelined"]]
        rows += [["evict", e["pod"], e["action"], e["message"]] for e in cycle["evictions"]]
        rows += [["unschedulable", u["podGroup"], u["reason"], u["message"]] for u in cycle["unschedulable"]]
        if rows:
            parts.append(_table(["DECISION", "OBJECT", "WHERE", "DETAIL"], rows))
        qrows = [[name] + [f"{q[r]['deserved']}/{q[r]['fairShare']}/{q[r]['allocated']}/{q[r]['limit']}" for r in RESOURCES]
                 for name, q in cycle["queues"].items()]
        if qrows:
            parts.append(_table(["QUEUE", "GPU d/fs/alloc/limit", "CPU(m)", "MEMORY(B)"], qrows))
    parts.append("== final ==\n")
    prow = [[k, v["phase"], v["node"] or "", v["nominatedNode"] or ""] for k, v in data["final"]["pods"].items()]
    parts.append(_table(["POD", "PHASE", "NODE", "NOMINATED"], prow))
    grow = [[k, str(v["running"]), str(v["pending"]), str(v["pipelined"])] for k, v in data["final"]["podGroups"].items()]
    parts.append(_table(["PODGROUP", "RUNNING", "PENDING", "PIPELINED"], grow))
    return "".join(parts)

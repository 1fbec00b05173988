"""Why a pod or pod group waits, told from what Shoal leaves on it, pure (SPEC §2.5): the verdict from the pod,
its PodGroup's `status.schedulingConditions`, their events and the last decisions about them; the queue's
fair-share figures in display units with the EFFECTIVE limit (SPEC §2.1: an omitted limit is the quota); the
text of an answer, a queue table and a decision event. `shoal.adapters.explain` gathers the inputs (apiserver,
Redis) into the answer these functions render.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

RESOURCES = ("gpu", "cpu", "memory")
# core units → display units: GPUs, CPU cores, memory bytes (as KAI's metrics)
SCALE = {"gpu": 1000.0, "cpu": 1000.0, "memory": 1.0}


def display(amount: int | float, resource: str) -> float | int:
    """A core amount in display units; -1 (unlimited) stays -1; whole numbers become ints."""
    if amount == -1:
        return -1
    value = round(amount / SCALE[resource], 3)
    return int(value) if float(value).is_integer() else value


def figures_json(queue: Any) -> dict[str, dict[str, Any]]:
    """One queue's QueueFigures as {resource: {deserved, fairShare, allocated, limit, request, ...}}."""
    out = {}
    for r in RESOURCES:
        f = getattr(queue, r)
        out[r] = {"deserved": display(f.deserved, r), "fairShare": display(f.fair_share, r),
                  "allocated": display(f.allocated, r), "limit": display(f.limit, r),
                  "request": display(f.request, r),
                  "allocatedNonPreemptible": display(f.allocated_non_preemptible, r)}
    return out


def limit_note(queue_obj: Mapping | None, resource: str, figures: Mapping[str, Any]) -> str:
    """How the effective limit came about: omitted (= quota), unlimited, or set."""
    limit = figures.get("limit")
    if limit == -1:
        return "unlimited"
    spec = ((queue_obj or {}).get("spec") or {}).get("resources") or {}
    section = spec.get(resource)
    if queue_obj is not None and (not isinstance(section, Mapping) or section.get("limit") is None):
        return f"{_n(limit)} (quota; limit omitted)"
    return _n(limit)


def _n(value: Any) -> str:
    return "unlimited" if value == -1 else str(value)


def queue_line(name: str, figures: Mapping[str, Mapping[str, Any]] | None, queue_obj: Mapping | None) -> str:
    if not figures:
        return f"queue {name}: no fair-share figures yet (the fairshare service has not published this shard)"
    g = figures["gpu"]
    line = (f"queue {name}: fair share {_n(g['fairShare'])} GPUs, allocated {_n(g['allocated'])}, "
            f"limit {limit_note(queue_obj, 'gpu', g)}, deserved {_n(g['deserved'])}, requested {_n(g['request'])}")
    c = figures["cpu"]
    if c["request"] and c["request"] != -1:
        line += f"; CPU fair share {_n(c['fairShare'])} cores, allocated {_n(c['allocated'])}"
    return line


def _kind(event: Mapping) -> str:
    return str(event.get("type", "")).rsplit(".", 1)[-1]


def verdict(pod: Mapping | None, pod_group: Mapping | None, decisions: Sequence[Mapping],
             events: Sequence[Mapping], subject: str) -> tuple[str, str]:
    """(status, one-line verdict)."""
    own = [d for d in decisions if d.get("subject") == subject]
    last = own[-1] if own else None
    if last is not None and _kind(last) == "evicted" and (pod is None or _terminating(pod)):
        data = last.get("data") or {}
        return "evicted", f"evicted by {data.get('action')} (by {data.get('by')}): {data.get('message', '')}"
    if pod is not None:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        phase = status.get("phase", "Pending")
        disruption = _condition(pod, "DisruptionTarget")
        if _terminating(pod) and disruption:
            return "evicted", f"evicted: {disruption.get('reason', '')}: {disruption.get('message', '')}"
        if spec.get("nodeName"):
            return ("running" if phase == "Running" else phase.lower()), f"{phase.lower()} on {spec['nodeName']}"
        if status.get("nominatedNodeName"):
            return "pipelined", f"pipelined onto {status['nominatedNodeName']} (waiting for resources being freed)"
        gates = sorted(str(g.get("name")) for g in spec.get("schedulingGates") or [] if isinstance(g, Mapping))
        if gates:  # e.g. Grove's grove.io/podgang-pending-creation: waiting, not failing
            return "gated", f"waiting until its scheduling gates are removed: {', '.join(gates)}"
    cond = _scheduling_condition(pod_group)
    if cond is not None:
        return "pending", f"pending: {_with_reason(cond)}"
    unsched = [d for d in decisions if _kind(d) == "unschedulable"]
    if unsched:
        data = unsched[-1].get("data") or {}
        return "pending", f"pending: {data.get('message', '')}"
    if pod is not None:
        cond = _condition(pod, "PodScheduled")
        if cond is not None and cond.get("status") == "False":
            return "pending", f"pending: {cond.get('message', '')}"
        return "pending", "pending: not considered yet (no decision about it so far)"
    evicts = [e for e in events if e.get("reason") == "Evict"]
    if evicts:
        e = evicts[-1]
        a = e.get("annotations") or {}
        by = f"{a.get('evictor-pod-group-namespace', '')}/{a.get('evictor-pod-group-name', '')}"
        return "evicted", f"evicted by {a.get('evictor-action-type', '?')} (by {by}): {e.get('message', '')}"
    if pod_group is not None:
        return "scheduled", "no pending reason: the pod group is scheduled"
    if last is not None:
        return "gone", f"no such pod or pod group any more; last decision: {describe(dict(last)).strip()}"
    return "unknown", "no such pod or pod group, and no decision about it"


def _with_reason(cond: Mapping) -> str:
    message = str(cond.get("message", ""))
    reasons = cond.get("reasons") or []
    if reasons and not message.startswith(str(reasons[0].get("reason", ""))):
        return f"{reasons[0].get('reason')}: {message}"
    return message


def _terminating(pod: Mapping) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _condition(obj: Mapping | None, kind: str) -> Mapping | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


def _scheduling_condition(pod_group: Mapping | None) -> Mapping | None:
    conds = ((pod_group or {}).get("status") or {}).get("schedulingConditions") or []
    return conds[-1] if conds else None


def describe(event: dict) -> str:
    """A one-line, human-readable rendering of a decision event."""
    kind = event.get("type", "").rsplit(".", 1)[-1]
    data = event.get("data") or {}
    when = event.get("time", "")[11:23]
    subject = event.get("subject", "")
    if kind in ("scheduled", "bound", "pipelined"):
        what = f"-> {data.get('node', '?')}"
        if data.get("fraction"):
            what += f" (GPU portion {data['fraction']}, group {','.join(data.get('gpuGroups') or [])})"
    elif kind == "unschedulable":
        what = data.get("message", "")
    elif kind == "evicted":
        what = f"[{data.get('action')}] by {data.get('by')}: {data.get('message', '')}"
    elif kind == "bind-failed":
        what = f"-> {data.get('node', '?')}: {data.get('error', '')}"
    elif kind == "gpu-shared":
        what = f"GPU groups {','.join(data.get('gpuGroups') or [])} on {data.get('node', '?')}"
    else:
        what = json.dumps(data, sort_keys=True)
    return f"{when} {kind:<13} {subject}  {what}"



def render(answer: Mapping[str, Any]) -> str:
    """The human-readable explanation: verdict, queue figures, then the trail (events, decisions)."""
    lines = [f"{answer['subject']}: {answer['verdict']}"]
    if answer.get("queueLine"):
        lines.append(answer["queueLine"])
    if answer.get("queue") and not answer.get("queueExists"):
        lines.append(f"queue {answer['queue']} does not exist")
    for e in answer.get("events") or []:
        lines.append(f"  event {e['time']} {e['object']} {e['type']} {e['reason']}: {e['message']}")
    for d in answer.get("decisions") or []:
        lines.append(f"  decision {describe(dict(d))}")
    return "\n".join(lines)


def render_queues(shards: Mapping[str, Mapping[str, Any]]) -> str:
    """`shoal queues` as a table: one row per shard and queue (GPUs; CPU cores)."""
    header = ("SHARD", "QUEUE", "GPU DESERVED", "GPU FAIR", "GPU ALLOC", "GPU LIMIT", "GPU REQ", "CPU FAIR",
              "CPU ALLOC")
    rows = [header]
    for shard in sorted(shards):
        for name, f in sorted(shards[shard]["queues"].items()):
            g, c = f["gpu"], f["cpu"]
            rows.append((shard, name, _n(g["deserved"]), _n(g["fairShare"]), _n(g["allocated"]), _n(g["limit"]),
                         _n(g["request"]), _n(c["fairShare"]), _n(c["allocated"])))
    if len(rows) == 1:
        return "no fair-share figures published yet"
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)

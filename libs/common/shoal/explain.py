""""Why is my job pending?" — one answer built from every place Shoal leaves a trace (SPEC §2.5).

Used by the api service (`GET /v1/explain/{namespace}/{name}`) and by `shoal explain` when no api is reachable::

    answer = await explain(kube, fair_shares, "team-a", "train-0", decisions_for=index.about)
    print(render(answer))
    # pending: PodSchedulingErrors: Resources were found for 4 pods while 5 are required for gang scheduling. …
    # queue q: fair share 4 GPUs, allocated 4, limit 4 (quota; limit omitted)

Sources: the pod (phase, node, conditions) and its PodGroup (`status.schedulingConditions`) on the apiserver,
the events of both, the last decisions about them (`shoal.decisions.v1`, from the api's bounded index or none),
and the queue's fair-share figures from Redis (`FairShareComputed` per shard) with the EFFECTIVE limit
(SPEC §2.1: an omitted limit is the quota). The answer is a JSON-able dict; `render` turns it into lines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from redis.asyncio import Redis

from shoal.adapters import kube as k
from shoal.adapters import redis_keys
from shoal.adapters.latest_value import LatestValue
from shoal.adapters.redis_client import redis_call
from shoal.cli.events import describe
from shoal.core.fields import mapping, value_at
from shoal.core.kai_labels import NODE_POOL_LABEL, POD_GROUP_ANNOTATION, QUEUE_LABELS
from shoal.errors import NotFoundError
from shoal.messages.plan import FairShareComputed

CORE_EVENTS = k.Resource("", "v1", "events", "Event")
DEFAULT_SHARD = "default"
RESOURCES = ("gpu", "cpu", "memory")
# core units → display units: GPUs, CPU cores, memory bytes (as KAI's metrics)
SCALE = {"gpu": 1000.0, "cpu": 1000.0, "memory": 1.0}
MAX_EVENTS = 10
MAX_DECISIONS = 10

DecisionsFor = Callable[[Sequence[str]], Sequence[Mapping[str, Any]]]


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


def queues_json(computed: FairShareComputed) -> dict[str, Any]:
    """A shard's figures for `/v1/queues` and `shoal queues`."""
    return {"revision": computed.revision, "producedAt": computed.meta.produced_at,
            "queues": {q.name: figures_json(q) for q in computed.queues}}


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


def _verdict(pod: Mapping | None, pod_group: Mapping | None, decisions: Sequence[Mapping],
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


async def _get(kube: k.Kube, resource: k.Resource, name: str, namespace: str | None = None) -> dict | None:
    try:
        return await kube.get(resource, name, namespace=namespace)
    except NotFoundError:
        return None


async def _events(kube: k.Kube, namespace: str, names: Iterable[str]) -> list[dict]:
    out = []
    for name in dict.fromkeys(n for n in names if n):
        items, _ = await kube.list(CORE_EVENTS, namespace=namespace, field_selector=f"involvedObject.name={name}")
        for e in items:
            obj = e.get("involvedObject") or {}
            out.append({"object": f"{obj.get('kind', '')}/{obj.get('name', '')}", "type": e.get("type", ""),
                        "reason": e.get("reason", ""), "message": e.get("message", ""),
                        "time": e.get("lastTimestamp") or e.get("eventTime") or "",
                        "count": e.get("count", 1),
                        "annotations": (e.get("metadata") or {}).get("annotations") or {}})
    out.sort(key=lambda e: e["time"])
    return out[-MAX_EVENTS:]


async def explain(kube: k.Kube, fair_shares: LatestValue[FairShareComputed] | None, namespace: str, name: str,
                  *, decisions_for: DecisionsFor | None = None) -> dict[str, Any]:
    """The explanation of pod or pod group `namespace/name` (a pod is looked up first)."""
    subject = f"{namespace}/{name}"
    pod = await _get(kube, k.PODS, name, namespace)
    pg_name = mapping(pod, "metadata", "annotations").get(POD_GROUP_ANNOTATION) if pod else name
    pod_group = await _get(kube, k.PODGROUPS, pg_name, namespace) if pg_name else None
    if pod_group is None and decisions_for is not None:  # a gone (or not yet annotated) pod: group from decisions
        groups = [str((d.get("data") or {}).get("podGroup", "")) for d in decisions_for([subject])]
        ns_pg = next((g for g in reversed(groups) if g.startswith(f"{namespace}/")), "")
        if ns_pg:
            pg_name = ns_pg.split("/", 1)[1]
            pod_group = await _get(kube, k.PODGROUPS, pg_name, namespace)
    pg_subject = f"{namespace}/{pg_name}" if pod_group is not None else None
    subjects = [subject] + ([pg_subject] if pg_subject and pg_subject != subject else [])
    decisions = list(decisions_for(subjects))[-MAX_DECISIONS:] if decisions_for else []
    events = await _events(kube, namespace, [name, pg_name or ""])
    owner = pod_group or pod or {}
    labels = (owner.get("metadata") or {}).get("labels") or {}
    queue = value_at(pod_group, "spec", "queue") or next(
        (labels[label] for label in QUEUE_LABELS if labels.get(label)), "")
    shard = labels.get(NODE_POOL_LABEL) or next((d.get("shard") for d in reversed(decisions) if d.get("shard")),
                                           None) or DEFAULT_SHARD
    status, verdict = _verdict(pod, pod_group, decisions, events, subject)
    figures, revision = None, None
    if queue and fair_shares is not None:
        computed = await fair_shares.get(shard)
        if computed is not None:
            revision = computed.revision
            figures = next((figures_json(q) for q in computed.value.queues if q.name == queue), None)
    queue_obj = await _get(kube, k.QUEUES, queue) if queue else None
    if figures is not None:
        for r in RESOURCES:
            figures[r]["limitNote"] = limit_note(queue_obj, r, figures[r])
    return {
        "subject": subject, "kind": "Pod" if pod is not None else ("PodGroup" if pod_group else None),
        "found": pod is not None or pod_group is not None,
        "podGroup": pg_subject, "shard": shard, "queue": queue or None, "queueExists": queue_obj is not None,
        "status": status, "verdict": verdict,
        "queueLine": queue_line(queue, figures, queue_obj) if queue else None,
        "queueFigures": figures, "fairShareRevision": revision,
        "schedulingConditions": ((pod_group or {}).get("status") or {}).get("schedulingConditions") or [],
        "podConditions": ((pod or {}).get("status") or {}).get("conditions") or [],
        "node": ((pod or {}).get("spec") or {}).get("nodeName"),
        "events": events, "decisions": decisions,
    }


async def all_queues(redis: Redis, *, shard: str | None = None) -> dict[str, dict[str, Any]]:
    """Every shard's latest fair-share figures in Redis (or only `shard`), as `queues_json` per shard."""
    fair_shares = LatestValue(redis, redis_keys.fair_share, FairShareComputed)
    if shard:
        shards = [shard]
    else:
        prefix = redis_keys.fair_share("x")[:-1]

        async def scan() -> list[str]:
            return sorted({key.decode()[len(prefix):] async for key in redis.scan_iter(match=prefix + "*")})

        shards = await redis_call("fair_share_shards", scan)
    out = {}
    for name in shards:
        current = await fair_shares.get(name)
        if current is not None:
            out[name] = queues_json(current.value)
    return out


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

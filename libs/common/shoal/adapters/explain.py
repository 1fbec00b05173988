""""Why is my job pending?" — one answer built from every place Shoal leaves a trace (SPEC §2.5), gathered here
and told by `shoal.core.explanation`.

Used by the api service (`GET /v1/explain/{namespace}/{name}`) and by `shoal explain` when no api is reachable::

    answer = await explain(kube, fair_shares, "team-a", "train-0", decisions_for=index.about)
    print(render(answer))  # shoal.core.explanation.render
    # pending: PodSchedulingErrors: Resources were found for 4 pods while 5 are required for gang scheduling. …
    # queue q: fair share 4 GPUs, allocated 4, limit 4 (quota; limit omitted)

Sources: the pod (phase, node, conditions) and its PodGroup (`status.schedulingConditions`) on the apiserver,
the events of both, the last decisions about them (`shoal.decisions.v1`, from the api's bounded index or none),
and the queue's fair-share figures from Redis (`FairShareComputed` per shard). The answer is a JSON-able dict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from redis.asyncio import Redis

from shoal.adapters import kube as k
from shoal.adapters import redis_keys
from shoal.adapters.latest_value import LatestValue
from shoal.adapters.redis_client import redis_call
from shoal.core.explanation import RESOURCES, figures_json, limit_note, queue_line, verdict
from shoal.core.fields import mapping, value_at
from shoal.core.kai_labels import NODE_POOL_LABEL, POD_GROUP_ANNOTATION, QUEUE_LABELS
from shoal.errors import NotFoundError
from shoal.messages.plan import FairShareComputed

CORE_EVENTS = k.Resource("", "v1", "events", "Event")
DEFAULT_SHARD = "default"
MAX_EVENTS = 10
MAX_DECISIONS = 10

DecisionsFor = Callable[[Sequence[str]], Sequence[Mapping[str, Any]]]


def queues_json(computed: FairShareComputed) -> dict[str, Any]:
    """A shard's figures for `/v1/queues` and `shoal queues`."""
    return {"revision": computed.revision, "producedAt": computed.meta.produced_at,
            "queues": {q.name: figures_json(q) for q in computed.queues}}


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
    status, told = verdict(pod, pod_group, decisions, events, subject)
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
        "status": status, "verdict": told,
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

"""The dashboard's workload lists: pending PodGroups with their current reason, and evicted pods (pure).

    pending(shards, decisions_for=index.about, figures=all_queues_answer)
    # [{"podGroup": "ns/train", "queue": "q", "shard": "pool-a", "reason": "PodSchedulingErrors",
    #   "message": "Resources were found for 4 pods while 5 are required for gang scheduling…",
    #   "queueLine": "queue q: fair share 4 GPUs, allocated 4, limit 4 (quota; limit omitted), …", …}]
    evictions = Evictions(500); evictions.add(decision); evictions.list(shards)

A PodGroup is pending while one of its pods waits for a node (neither bound nor pipelined). Its reason is the
planner's last `unschedulable` decision about it (the message the binder writes into its
`schedulingConditions`), else the condition reason in the snapshot; `queueLine` is `shoal explain`'s line for
its queue. The full explanation of one item is `GET /v1/explain/{namespace}/{name}`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from services.api.gpumap import DONE, queue_of
from services.api.queuetree import spec_of
from shoal.adapters.shard_snapshots import Current
from shoal.core.explanation import queue_line

DecisionsFor = Callable[[Sequence[str]], Sequence[Mapping[str, Any]]]
UNSCHEDULABLE = "io.shoal.decision.unschedulable"


def _groups(current: Current) -> dict[str, dict[str, Any]]:
    """Per PodGroup of the shard: its pods counted by state, its queue and creation time."""
    model = current.model
    out: dict[str, dict[str, Any]] = {}
    for entry in model.pods.values():
        pod = entry.pod
        if pod.phase in DONE or not pod.pod_group:
            continue
        key = f"{pod.namespace}/{pod.pod_group}"
        group = out.get(key)
        if group is None:
            pg = model.pod_groups.get(key)
            group = out[key] = {"podGroup": key, "namespace": pod.namespace, "name": pod.pod_group,
                                "queue": queue_of(pod, model), "minMember": pg.min_member if pg else 1,
                                "created": str(pg.created) if pg and pg.created else str(pod.created or ""),
                                "conditionReason": pg.condition_reason if pg else None,
                                "exists": pg is not None, "pending": 0, "pipelined": 0, "running": 0,
                                "firstPod": pod.key}
        state = "running" if pod.node_name else ("pipelined" if pod.nominated_node else "pending")
        group[state] += 1
        if pod.key < group["firstPod"]:
            group["firstPod"] = pod.key
    return out


def _verdict(decisions: Sequence[Mapping[str, Any]], key: str) -> tuple[Mapping[str, Any] | None, str]:
    """(the last `unschedulable` decision about the group, what happened since when that says more)."""
    verdict, since = None, ""
    for event in decisions:
        kind, data = str(event.get("type", "")).rsplit(".", 1)[-1], event.get("data") or {}
        if kind == "unschedulable" and event.get("subject") == key:
            verdict, since = event, ""
        elif kind in ("scheduled", "pipelined"):
            since = (f"{event.get('subject')} {kind} onto {data.get('node')}: "
                     + ("being bound" if kind == "scheduled" else "waiting for the resources being freed there"))
        elif kind == "bind-failed":
            since = f"binding {event.get('subject')} to {data.get('node')} failed: {data.get('error', '')}"
        elif kind == "evicted":
            since = (f"{event.get('subject')} was evicted ({data.get('action')} by {data.get('by')}); "
                     "waiting to be scheduled again")
        elif kind == "bound":
            since = ""
    return verdict, since


def pending(shards: Mapping[str, Current], *, decisions_for: DecisionsFor,
            figures: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every pending PodGroup of every shard, newest first (creation time, then name)."""
    out = []
    for shard, current in shards.items():
        queues = current.model.queues
        published = (figures.get(shard) or {}).get("queues") or {}
        for key, group in _groups(current).items():
            if not group["pending"]:
                continue
            last, since = _verdict(decisions_for([key]), key)
            data = (last or {}).get("data") or {}
            condition = group.pop("conditionReason", None)
            reason = "" if since else (data.get("reason") or condition or "")
            message = since or data.get("message") or (
                "" if reason else "not considered yet (no decision about it so far)")
            queue = group["queue"]
            group.update(shard=shard, reason=reason, message=message, verdictTime=(last or {}).get("time"),
                         queueLine=queue_line(queue, published.get(queue), spec_of(queues.get(queue)))
                         if queue else "no queue: the pod group names none")
            out.append(group)
    out.sort(key=lambda g: (g["created"], g["podGroup"]), reverse=True)
    return out


def select(items: Sequence[dict[str, Any]], *, queue: str = "", namespace: str = "") -> list[dict[str, Any]]:
    return [i for i in items if (not queue or i.get("queue") == queue)
            and (not namespace or i.get("namespace") == namespace)]


def page(items: Sequence[dict[str, Any]], query: Mapping[str, str], *, default_limit: int = 50) -> dict[str, Any]:
    """`offset`/`limit` of the query applied (bad values read as the defaults), with the facets to filter by;
    `total` counts the items the filters chose, `all` every item."""
    def number(name: str, default: int, top: int) -> int:
        try:
            return max(0, min(int(query.get(name, default)), top))
        except ValueError:
            return default

    offset, limit = number("offset", 0, 10**9), number("limit", default_limit, 1000) or default_limit
    chosen = select(items, queue=query.get("queue", ""), namespace=query.get("namespace", ""))
    return {"all": len(items), "total": len(chosen), "offset": offset, "limit": limit, "items": chosen[offset:offset + limit],
            "queues": sorted({str(i.get("queue") or "") for i in items} - {""}),
            "namespaces": sorted({str(i.get("namespace") or "") for i in items} - {""})}


class Evictions:
    """The last `size` evicted decisions, newest last (an id seen twice is kept once)."""

    def __init__(self, size: int = 500) -> None:
        self._items: deque[dict[str, Any]] = deque(maxlen=size)
        self._ids: set[str] = set()

    def add(self, event: Mapping[str, Any]) -> None:
        if not str(event.get("type", "")).endswith(".evicted"):
            return
        event_id = str(event.get("id", ""))
        if event_id in self._ids:
            return
        if len(self._items) == self._items.maxlen:
            self._ids.discard(self._items[0]["id"])
        self._ids.add(event_id)
        data = event.get("data") or {}
        subject = str(event.get("subject", ""))
        self._items.append({"id": event_id, "time": event.get("time"), "shard": event.get("shard", ""),
                            "pod": subject, "namespace": subject.split("/", 1)[0],
                            "podGroup": data.get("podGroup"), "node": data.get("node"),
                            "action": data.get("action"), "by": data.get("by"), "message": data.get("message", "")})

    def list(self, shards: Mapping[str, Current]) -> list[dict[str, Any]]:
        """Newest first, each with the queue of its PodGroup when the snapshot still has it."""
        out = []
        for item in reversed(self._items):
            model = shards[item["shard"]].model if item["shard"] in shards else None
            group = model.pod_groups.get(item["podGroup"] or "") if model is not None else None
            out.append({**item, "queue": group.queue if group is not None else None})
        return out

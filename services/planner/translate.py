"""Pure pieces of the planner: in-flight overlay, decision events, in-flight entries of a plan."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

from shoal.core.plan import Bind, Evict, Pipeline, Plan, SetCondition
from shoal.messages.decisions import Decision, decision
from shoal.messages.snapshot import InFlightBind

GPU_GROUP_LABEL = "runai-gpu-group"


def overlay_inflight(objects: Sequence[dict], inflight: Iterable[InFlightBind], now_s: float) -> list[dict]:
    """The snapshot objects with every unexpired in-flight bind applied: the pod shows as placed on its
    node (and in its GPU groups), so its resources count as allocated and it is not planned twice."""
    live = {e.pod_uid: e for e in inflight if e.expires_at > now_s}
    by_name = {e.pod: e for e in live.values()}
    out = []
    for obj in objects:
        if obj.get("kind") == "Pod":
            meta = obj.get("metadata") or {}
            entry = live.get(meta.get("uid", "")) or by_name.get(f"{meta.get('namespace')}/{meta.get('name')}")
            if entry is not None and not (obj.get("spec") or {}).get("nodeName"):
                obj = copy.deepcopy(obj)
                obj.setdefault("spec", {})["nodeName"] = entry.node
                if entry.gpu_groups:
                    labels = obj["metadata"].setdefault("labels", {})
                    if len(entry.gpu_groups) == 1:
                        labels[GPU_GROUP_LABEL] = entry.gpu_groups[0]
                    else:
                        for group in entry.gpu_groups:
                            labels[f"{GPU_GROUP_LABEL}/{group}"] = group
        out.append(obj)
    return out


def inflight_entries(plan: Plan, *, now_s: float, ttl_s: float) -> list[InFlightBind]:
    return [InFlightBind(pod=op.pod, pod_uid=op.pod_uid, node=op.node, gpu_groups=op.gpu_groups,
                         plan_id=plan.plan_id, expires_at=now_s + ttl_s)
            for op in plan.ops if isinstance(op, Bind)]


def decisions(plan: Plan, shard: str) -> list[Decision]:
    """One public decision event per scheduling decision of the plan (ids derived from the plan id, so a
    re-published plan yields the same event ids and subscribers can de-duplicate)."""
    source = f"shoal/planner/{shard}"
    out = []
    for index, op in enumerate(plan.ops):
        common = {"source": source, "shard": shard, "plan_id": plan.plan_id, "revision": plan.revision,
                  "id": f"{plan.plan_id}-{index}"}
        if isinstance(op, Bind):
            out.append(decision("scheduled", subject=op.pod, **common,
                                data={"node": op.node, "podGroup": op.pod_group, "gpuGroups": list(op.gpu_groups),
                                      "fraction": op.fraction}))
        elif isinstance(op, Pipeline):
            out.append(decision("pipelined", subject=op.pod, **common,
                                data={"node": op.node, "podGroup": op.pod_group}))
        elif isinstance(op, Evict):
            out.append(decision("evicted", subject=op.pod, **common,
                                data={"node": op.node, "podGroup": op.pod_group, "action": op.action,
                                      "by": op.by, "message": op.message}))
        elif isinstance(op, SetCondition):
            out.append(decision("unschedulable", subject=op.pod_group, **common,
                                data={"podGroup": op.pod_group, "reason": op.reason, "message": op.message}))
    return out

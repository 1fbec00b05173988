"""Pure pieces of the planner: binds in flight, decision events, in-flight entries of a plan."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from services.planner.verdicts import SnapshotGroups
from shoal.core.model import ANNOTATION_LAST_START
from shoal.core.plan import Annotate, Bind, Evict, Pipeline, Plan, PlanOp, SetCondition
from shoal.messages.decisions import Decision, decision
from shoal.messages.snapshot import InFlightBind


def inflight_binds(inflight: Iterable[InFlightBind], now_s: float) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Unexpired in-flight binds as `assemble` takes them: pod uid and "ns/name" → (node, GPU groups)."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for entry in inflight:
        if entry.expires_at > now_s and not entry.eviction:
            out[entry.pod] = out[entry.pod_uid] = (entry.node, entry.gpu_groups)
    return out


def inflight_evictions(inflight: Iterable[InFlightBind], now_s: float) -> set[str]:
    """Unexpired in-flight evictions as `assemble` takes them: the victims' uids (an Evict op always has one)."""
    return {e.pod_uid for e in inflight if e.eviction and e.expires_at > now_s}


def inflight_entries(plan: Plan, *, now_s: float, ttl_s: float) -> list[InFlightBind]:
    """What the plan puts in flight: its binds and its evictions (a victim is releasing until seen deleting)."""
    return [InFlightBind(pod=op.pod, pod_uid=op.pod_uid, node=op.node,
                         gpu_groups=op.gpu_groups if isinstance(op, Bind) else (), plan_id=plan.plan_id,
                         expires_at=now_s + ttl_s, eviction=isinstance(op, Evict), ttl_s=ttl_s)
            for op in plan.ops if isinstance(op, Bind | Evict)]


def cluster_ops(ops: Sequence[PlanOp], groups: SnapshotGroups) -> tuple[PlanOp, ...]:
    """The plan's operations as the binder applies them: the start stamp of a PodGroup made here for pods whose
    PodGroup the cluster does not have yet left out (a bare pod's: the podgrouper creates it after the bind,
    with the stamp in it)."""
    def made_here(key: str) -> bool:
        group = groups.find(key)
        return group is not None and group.generated

    return tuple(op for op in ops if not (isinstance(op, Annotate) and op.key == ANNOTATION_LAST_START
                                          and made_here(op.pod_group)))


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

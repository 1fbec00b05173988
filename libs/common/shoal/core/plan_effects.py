"""How a plan's operations show on Kubernetes objects, in KAI's shapes: the labels and annotations of a bound pod,
a PodGroup's scheduling condition (kept when unchanged, else the next transition), its core pods, a cleared
condition and an annotation, each as the merge patch the binder sends to the apiserver and `shoal simulate`
applies to its cluster in memory (`merge_patch`). Pure; written once for both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shoal.core.kai_labels import RECEIVED_TYPE, gpu_group_labels
from shoal.core.plan import Annotate, Bind, ClearCondition, SetCondition, SetCorePods


def bound_pod_metadata(op: Bind) -> dict[str, dict[str, str]]:
    """A bound pod's labels (its shared GPUs' groups) and annotations (the received resource type)."""
    return {"labels": gpu_group_labels(op.gpu_groups), "annotations": {RECEIVED_TYPE: op.received_resource_type}}


def next_condition(existing: Sequence[Mapping[str, Any]], op: SetCondition, now: str) -> dict | None:
    """The PodGroup's schedulingConditions[0] after `op`, or None when the current one says the same (same
    reason and message: not rewritten, its transition time kept); a new one is the next transition."""
    if existing and existing[0].get("message") == op.message and \
            ((existing[0].get("reasons") or [{}])[0].get("reason") or op.reason) == op.reason:
        return None
    transition = str(int(existing[0].get("transitionID", "0")) + 1) if existing else "0"
    return scheduling_condition(op, transition, now)


def condition_patch(condition: dict) -> dict:
    return {"status": {"schedulingConditions": [condition]}}


def cleared_condition_patch(op: ClearCondition) -> dict:
    """No scheduling condition any more: the field removed (KAI omits an empty list)."""
    return {"status": {"schedulingConditions": None}}


def core_pods_patch(op: SetCorePods) -> dict:
    return {"status": {"schedulingState": {"corePods": list(op.pods)}}}


def annotation_patch(op: Annotate) -> dict:
    return {"metadata": {"annotations": {op.key: op.value}}}


def merge_patch(target: dict, patch: Mapping[str, Any]) -> None:
    """Apply a JSON merge patch (RFC 7386) to `target` in place: maps merge, None removes, the rest replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping):
            current = target.get(key)
            if not isinstance(current, dict):
                current = target[key] = {}
            merge_patch(current, value)
        else:
            target[key] = value


def scheduling_condition(op: SetCondition, transition_id: str, now: str) -> dict:
    reasons = []
    for r in op.reasons or ():
        item: dict = {"reason": r.reason, "message": r.message}
        if r.details is not None:
            d = r.details
            item["details"] = {"queueDetails": {
                "name": d.name,
                "queueRequestedResources": _resources(d.requested),
                "queueDeservedResources": _resources(d.deserved),
                "queueAllocatedResources": _resources(d.allocated),
                "queueAllocatedNonPreemptibleResources": _resources(d.allocated_non_preemptible),
                "queueResourceLimits": _resources(d.limit),
                "podGroupRequestedResources": _resources(d.pod_group_requested),
                "podGroupRequestedNonPreemptibleResources": _resources(d.pod_group_requested_non_preemptible),
            }}
        reasons.append(item)
    if not reasons:
        reasons = [{"reason": op.reason, "message": op.message}]
    return {"type": "UnschedulableOnNodePool", "nodePool": op.node_pool or "default", "reason": "Unschedulable",
            "message": op.message, "reasons": reasons, "status": "True", "transitionID": transition_id,
            "lastTransitionTime": now}


def _resources(vec: tuple[int, int, int]) -> dict[str, str]:
    cpu, memory, gpu = vec
    out = {"cpu": f"{cpu}m" if cpu >= 0 else "-1", "memory": str(memory)}
    out["nvidia.com/gpu"] = gpus_text(gpu)
    return out


def gpus_text(milli: int) -> str:
    if milli < 0:
        return "-1"
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli / 1000:g}"

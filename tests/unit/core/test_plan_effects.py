"""How a plan's operations show on objects (shoal.core.plan_effects), as the binder patches them and `shoal
simulate` applies them: the merge-patch rules, a condition kept when unchanged and the next transition else."""

from __future__ import annotations

from shoal.core.plan import Annotate, Bind, ClearCondition, ConditionReason, SetCondition, SetCorePods
from shoal.core.plan_effects import (
    annotation_patch,
    bound_pod_metadata,
    cleared_condition_patch,
    condition_patch,
    core_pods_patch,
    merge_patch,
    next_condition,
)

NOW = "2026-01-01T00:00:00Z"


def test_merge_patch_merges_maps_replaces_the_rest_and_removes_nulls() -> None:
    doc = {"metadata": {"labels": {"a": "1"}}, "status": {"schedulingConditions": [{"x": 1}], "phase": "P"}}
    merge_patch(doc, {"metadata": {"labels": {"b": "2"}, "annotations": {"k": "v"}},
                      "status": {"schedulingConditions": None, "phase": "Running"}})
    assert doc == {"metadata": {"labels": {"a": "1", "b": "2"}, "annotations": {"k": "v"}},
                   "status": {"phase": "Running"}}


def test_a_podgroup_takes_each_status_patch() -> None:
    group: dict = {"metadata": {"name": "pg"}}
    merge_patch(group, annotation_patch(Annotate(pod_group="ns/pg", key="k", value="v")))
    merge_patch(group, core_pods_patch(SetCorePods(pod_group="ns/pg", pods=("p-0", "p-1"))))
    op = SetCondition(pod_group="ns/pg", reason="OverLimit", message="too much",
                      reasons=(ConditionReason(reason="OverLimit", message="too much"),))
    condition = next_condition([], op, NOW)
    assert condition is not None
    merge_patch(group, condition_patch(condition))
    assert group["metadata"]["annotations"] == {"k": "v"}
    assert group["status"]["schedulingState"] == {"corePods": ["p-0", "p-1"]}
    assert [c["reasons"][0]["reason"] for c in group["status"]["schedulingConditions"]] == ["OverLimit"]
    merge_patch(group, cleared_condition_patch(ClearCondition(pod_group="ns/pg")))
    assert "schedulingConditions" not in group["status"]


def test_an_unchanged_condition_is_kept_and_a_changed_one_is_the_next_transition() -> None:
    op = SetCondition(pod_group="ns/pg", reason="OverLimit", message="too much")
    first = next_condition([], op, NOW)
    assert first is not None and first["transitionID"] == "0" and first["lastTransitionTime"] == NOW
    assert first["reasons"] == [{"reason": "OverLimit", "message": "too much"}]
    assert next_condition([first], op, "2026-01-02T00:00:00Z") is None
    changed = next_condition([first], SetCondition(pod_group="ns/pg", reason="OverLimit", message="more"), NOW)
    assert changed is not None and changed["transitionID"] == "1"


def test_a_bound_pod_carries_its_gpu_groups_and_received_type() -> None:
    op = Bind(pod="ns/p", pod_uid="u", node="n", gpu_groups=("g1",), fraction="0.50",
              received_resource_type="Fraction")
    meta = bound_pod_metadata(op)
    assert meta["annotations"] == {"received-resource-type": "Fraction"}
    assert meta["labels"] and all("g1" in v for v in meta["labels"].values())
    assert bound_pod_metadata(Bind(pod="ns/q", pod_uid="v", node="n"))["labels"] == {}

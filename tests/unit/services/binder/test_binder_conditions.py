"""The binder writes a PodGroup's scheduling condition only when its reason or message changed: the same
verdict every cycle costs a read, never a write (and keeps its transition id)."""

from __future__ import annotations

from services.binder.handlers import Binder
from shoal.core.plan import SetCondition
from shoal.core.plan_effects import scheduling_condition
from shoal.metrics import Metrics
from tests.unit.services.binder.test_binder_plan import FakeInFlight, FakeKube, FakeSeen, GatedBus

GANG = "Resources were found for 4 pods while 5 are required for gang scheduling"


def group_with(op: SetCondition | None) -> dict:
    status = {"schedulingConditions": [scheduling_condition(op, "3", "2026-01-01T00:00:00Z")]} if op else {}
    return {"metadata": {"name": "pg", "namespace": "ns", "uid": "u"}, "status": status}


async def test_an_unchanged_condition_is_not_rewritten_a_changed_one_is() -> None:
    same = SetCondition(pod_group="ns/pg", reason="PodSchedulingErrors", message=GANG)
    for current, op, written in ((None, same, True), (same, same, False),
                                 (same, SetCondition(pod_group="ns/pg", reason="OverLimit", message=GANG), True),
                                 (same, SetCondition(pod_group="ns/pg", reason="PodSchedulingErrors",
                                                     message=GANG.replace("4 pods", "3 pods")), True)):
        kube = FakeKube({"ns/pg": group_with(current)})
        binder = Binder(kube=kube, inflight=FakeInFlight({}), seen=FakeSeen(), bus=GatedBus(), metrics=Metrics())
        await binder.set_condition(op)
        patches = [c for c in kube.calls if c[0] == "patch"]
        assert bool(patches) == written, (current, op, kube.calls)

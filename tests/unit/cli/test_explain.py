"""shoal.adapters.explain and shoal.core.explanation: verdicts from conditions, decisions and events; the effective limit; rendering."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.adapters import kube as k
from shoal.adapters.explain import explain
from shoal.core.explanation import figures_json, limit_note, queue_line, render, render_queues
from shoal.core.plan import QueueFigures, ResourceFigures
from shoal.errors import NotFoundError
from shoal.messages.base import new_meta
from shoal.messages.plan import FairShareComputed

GANG = ("PodSchedulingErrors: Resources were found for 4 pods while 5 are required for gang scheduling. "
        "Additional pods cannot be scheduled due to: no nodes with enough resources were found")


class FakeKube:
    """The two calls explain makes, over a dict of objects keyed (plural, namespace, name)."""

    def __init__(self, objects: dict[tuple[str, str | None, str], dict], events: list[dict] | None = None) -> None:
        self.objects = objects
        self.events = events or []

    async def get(self, resource: k.Resource, name: str, *, namespace: str | None = None) -> dict:
        try:
            return self.objects[(resource.plural, namespace, name)]
        except KeyError:
            raise NotFoundError(f"{resource.plural}/{name}") from None

    async def list(self, resource: k.Resource, *, namespace: str | None = None, field_selector: str = "",
                   **_: Any) -> tuple[list[dict], str]:
        name = field_selector.split("=", 1)[1]
        return [e for e in self.events if e["involvedObject"]["name"] == name], "1"


class FakeShares:
    def __init__(self, computed: FairShareComputed | None) -> None:
        self.computed = computed

    async def get(self, shard: str) -> Any:
        from shoal.adapters.latest_value import Versioned

        return Versioned(self.computed.revision, self.computed) if self.computed and shard == "pool-a" else None


def figures(fair: int, allocated: int, limit: int, request: int = 5000) -> FairShareComputed:
    gpu = ResourceFigures(deserved=4000, fair_share=fair, allocated=allocated, limit=limit, request=request)
    return FairShareComputed(meta=new_meta("test"), shard="pool-a", revision=7,
                             queues=(QueueFigures(name="q", gpu=gpu),))


def cluster(pod_extra: dict | None = None, with_pod: bool = True, queue_gpu: dict | None = None) -> dict:
    pg = {"metadata": {"name": "pg", "namespace": "ns", "labels": {"kai.scheduler/node-pool": "pool-a"}},
          "spec": {"queue": "q", "minMember": 5},
          "status": {"schedulingConditions": [{"type": "UnschedulableOnNodePool", "reason": "Unschedulable",
                                               "message": GANG}]}}
    pod = {"metadata": {"name": "pg-0", "namespace": "ns", "annotations": {"pod-group-name": "pg"}},
           "spec": {}, "status": {"phase": "Pending"}, **(pod_extra or {})}
    objects = {("podgroups", "ns", "pg"): pg,
               ("queues", None, "q"): {"spec": {"resources": {"gpu": queue_gpu or {"quota": 4}}}}}
    if with_pod:
        objects[("pods", "ns", "pg-0")] = pod
    return objects


async def test_a_pending_gang_gets_its_condition_and_the_effective_limit():
    answer = await explain(FakeKube(cluster()), FakeShares(figures(4000, 4000, 4000)), "ns", "pg-0")
    assert answer["status"] == "pending" and answer["verdict"] == f"pending: {GANG}"
    assert answer["podGroup"] == "ns/pg" and answer["shard"] == "pool-a" and answer["queue"] == "q"
    assert answer["queueLine"].startswith("queue q: fair share 4 GPUs, allocated 4, limit 4 (quota; limit omitted)")
    assert answer["queueFigures"]["gpu"]["limitNote"] == "4 (quota; limit omitted)"
    assert answer["fairShareRevision"] == 7
    text = render(answer)
    assert text.splitlines()[0] == f"ns/pg-0: pending: {GANG}"


async def test_an_evicted_pod_is_explained_from_its_decision():
    evicted = {"id": "1", "type": "io.shoal.decision.evicted", "subject": "ns/pg-0", "time": "2026-01-01T00:00:01Z",
               "shard": "pool-a", "data": {"action": "reclaim", "by": "ns/hi", "message": "was reclaimed by hi",
                                           "podGroup": "ns/pg"}}
    answer = await explain(FakeKube(cluster(with_pod=False)), None, "ns", "pg-0",
                           decisions_for=lambda subjects: [evicted] if "ns/pg-0" in subjects else [])
    assert answer["status"] == "evicted"
    assert answer["verdict"] == "evicted by reclaim (by ns/hi): was reclaimed by hi"
    assert answer["queueLine"].startswith("queue q: no fair-share figures yet")


async def test_an_evict_event_explains_a_gone_pod_without_decisions():
    event = {"involvedObject": {"kind": "PodGroup", "name": "lo"}, "reason": "Evict", "type": "Normal",
             "message": "pod evicted", "lastTimestamp": "2026-01-01T00:00:00Z",
             "metadata": {"annotations": {"evictor-action-type": "preempt", "evictor-pod-group-namespace": "ns",
                                          "evictor-pod-group-name": "urgent"}}}
    answer = await explain(FakeKube({}, [event]), None, "ns", "lo")
    assert answer["verdict"] == "evicted by preempt (by ns/urgent): pod evicted"


async def test_running_pods_and_unknown_names():
    running = cluster({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    answer = await explain(FakeKube(running), None, "ns", "pg-0")
    assert (answer["status"], answer["verdict"]) == ("running", "running on n1")
    answer = await explain(FakeKube({}), None, "ns", "nope")
    assert answer["status"] == "unknown" and not answer["found"]


@pytest.mark.parametrize(("spec", "limit", "note"), [
    ({"quota": 4}, 4000, "4 (quota; limit omitted)"),
    ({"quota": 4, "limit": 6}, 6000, "6"),
    ({"quota": 4, "limit": -1}, -1, "unlimited"),
    (None, 0, "0 (quota; limit omitted)"),
])
def test_limit_notes(spec, limit, note):
    queue = {"spec": {"resources": {"gpu": spec} if spec else {}}}
    figs = figures_json(QueueFigures(name="q", gpu=ResourceFigures(limit=limit)))
    assert limit_note(queue, "gpu", figs["gpu"]) == note


def test_queue_line_and_table():
    figs = figures_json(figures(2500, 1000, -1).queues[0])
    assert queue_line("q", figs, {"spec": {}}) == ("queue q: fair share 2.5 GPUs, allocated 1, limit unlimited, "
                                                   "deserved 4, requested 5")
    table = render_queues({"pool-a": {"queues": {"q": figs}}}).splitlines()
    assert table[1].split() == ["pool-a", "q", "4", "2.5", "1", "unlimited", "5", "0", "0"]
    assert render_queues({}) == "no fair-share figures published yet"


async def test_a_gated_pod_is_waiting_for_its_gates():
    gated = cluster({"spec": {"schedulingGates": [{"name": "grove.io/podgang-pending-creation"}]}})
    answer = await explain(FakeKube(gated), None, "ns", "pg-0")
    assert (answer["status"], answer["verdict"]) == (
        "gated", "waiting until its scheduling gates are removed: grove.io/podgang-pending-creation")

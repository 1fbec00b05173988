"""The fairshare service and the planner divide fair share from the same inputs (issue 16 item 3): both read
PlanningSettings from one environment (SchedulerConfig, sharing modes, reservation namespace, usage), so for one
snapshot the figures the fairshare service publishes are the ones in the planner's plan."""

from __future__ import annotations

from services.fairshare.config import FairShareSettings
from services.fairshare.handlers import FairShare
from services.planner.config import PlannerSettings
from services.planner.handlers import Planner
from services.snapshotter.translate import Shards
from shoal.adapters.kafka import Delivery
from shoal.adapters.planning import ShardInputs, shard_inputs
from shoal.adapters.shard_snapshots import Current
from shoal.core.plan import Bind, Evict
from shoal.messages.base import new_meta
from shoal.messages.plan import FairShareComputed, PlanIssued
from shoal.messages.snapshot import SnapshotPublished
from shoal.metrics import Metrics
from shoal.settings import load_settings

NOW = "2026-01-01T00:00:00Z"
DELIVERY = Delivery(topic="snapshots", partition=0, offset=0, key=None, headers=(), timestamp_ms=0)
USAGE = {"a": {"gpu": 0.6, "cpu": 0.2, "memory": 0.0}, "c": {"gpu": 0.05}}


def queue(name: str, quota: int, weight: int) -> dict:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {"gpu": {"quota": quota, "limit": -1, "overQuotaWeight": weight}}}}


def node(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": name},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "256Gi", "pods": "110"}}}


def pod(q: str, i: int, node_name: str | None) -> list[dict]:
    """A one-GPU pod of queue `q` and its PodGroup, running on `node_name` or pending."""
    name = f"{q}-{i}"
    spec: dict = {"schedulerName": "shoal-scheduler", "containers": [{"name": "c", "resources": {
        "limits": {"nvidia.com/gpu": 1}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return [{"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": name, "namespace": "ns", "uid": f"pg-{name}"}, "spec": {"minMember": 1, "queue": q}},
            {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": name, "namespace": "ns", "uid": name, "annotations": {"pod-group-name": name},
                          "labels": {"kai.scheduler/queue": q}},
             "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}]


def cluster(pending_each: int) -> tuple[dict, ...]:
    """Two 8-GPU nodes held by queues a (10 GPUs) and b (6), and pending pods of a, b and c."""
    objects = [node("n1"), node("n2"), queue("a", 2, 1), queue("b", 2, 3), queue("c", 0, 1)]
    for i in range(16):
        objects += pod("a" if i < 10 else "b", i, "n1" if i < 8 else "n2")
    for q in "abc":
        for i in range(pending_each):
            objects += pod(q, 100 + i, None)
    return tuple(objects)


class Snapshots:
    def __init__(self, objects: tuple[dict, ...]):
        shards = Shards("shoal-scheduler", fixed=("default",), now=lambda: NOW)
        for obj in objects:
            assert shards.update(obj) is None
        self.current = Current(revision=7, chain="c", taken_at=NOW, model=shards.model("default"))

    async def read(self, shard):
        return self.current


class Usage:
    async def usage(self, shard, *, now_s, fresh=False):
        return USAGE


class Bus:
    def __init__(self) -> None:
        self.sent: list = []

    async def publish(self, topic, message, *, key=None, headers=None):
        self.sent.append(message)
        return 0, len(self.sent)


class Store:
    async def get(self, shard):
        return None

    async def put(self, shard, revision, value):
        return True

    async def all(self, shard):
        return []

    async def add(self, shard, entries):
        pass


def environment(tmp_path) -> dict[str, str]:
    config = tmp_path / "scheduler-config.yaml"
    config.write_text("apiVersion: shoal.io/v1alpha1\nkind: SchedulerConfig\nspec:\n  kValue: 3\n")
    return {"SHOAL_SCHEDULER_CONFIG": str(config), "SHOAL_RESERVATION_NAMESPACE": "gpu-reserve",
            "SHOAL_GPU_SHARING_MODE": "HamiCore"}


async def planned(objects: tuple[dict, ...], inputs: ShardInputs) -> PlanIssued:
    bus = Bus()
    planner = Planner(shard_filter=frozenset(), snapshots=Snapshots(objects), fair_shares=Store(), inflight=Store(),
                      bus=bus, metrics=Metrics(), inputs=inputs)
    await planner.on_snapshot(SnapshotPublished(meta=new_meta("snapshotter", revision=7), shard="default",
                                                revision=7, chain="c"), DELIVERY)
    return next(m for m in bus.sent if isinstance(m, PlanIssued))


async def published(objects: tuple[dict, ...], inputs: ShardInputs) -> FairShareComputed:
    bus = Bus()
    service = FairShare(snapshots=Snapshots(objects), results=Store(), bus=bus, metrics=Metrics(), inputs=inputs)
    await service.on_snapshot(SnapshotPublished(meta=new_meta("snapshotter", revision=7), shard="default",
                                                revision=7, chain="c"), DELIVERY)
    return next(m for m in bus.sent if isinstance(m, FairShareComputed))


def division(queues) -> list:
    """Every figure but `allocated` (the plan's is counted after its own binds and evictions)."""
    return [(q.name, res, f.deserved, f.fair_share, f.limit, f.request)
            for q in queues for res, f in (("gpu", q.gpu), ("cpu", q.cpu), ("memory", q.memory))]


async def test_the_fairshare_service_publishes_the_figures_the_planner_divides(tmp_path):
    env = environment(tmp_path)
    planner_inputs = shard_inputs(load_settings(PlannerSettings, env), Usage())
    fairshare_inputs = shard_inputs(load_settings(FairShareSettings, env), Usage())
    assert planner_inputs.given("default", USAGE) == fairshare_inputs.given("default", USAGE)
    assert planner_inputs.config_doc == fairshare_inputs.config_doc == {
        "apiVersion": "shoal.io/v1alpha1", "kind": "SchedulerConfig", "spec": {"kValue": 3}}
    full = cluster(pending_each=8)  # a holds 10 GPUs, over the fair share its usage leaves it: b reclaims
    freed = tuple(o for o in full if o["metadata"]["name"] not in ("b-14", "b-15"))  # and 2 GPUs free
    for objects, kind in ((full, Evict), (freed, Bind)):
        plan = await planned(objects, planner_inputs)
        figures = await published(objects, fairshare_inputs)
        assert any(isinstance(op, kind) for op in plan.ops)
        assert plan.queues and division(plan.queues) == division(figures.queues)
    # the inputs matter: without the document's kValue and the usage, the division differs
    default = await published(full, ShardInputs())
    assert division(default.queues) != division(figures.queues)


async def test_a_scheduler_config_naming_another_reservation_namespace_is_refused(tmp_path):
    config = tmp_path / "scheduler-config.yaml"
    config.write_text("spec:\n  kValue: 3\n  reservationNamespace: elsewhere\n")
    env = {"SHOAL_SCHEDULER_CONFIG": str(config), "SHOAL_RESERVATION_NAMESPACE": "gpu-reserve"}
    inputs = shard_inputs(load_settings(PlannerSettings, env), None)
    from shoal.core.ingest.shard_model import assemble

    current = Snapshots(cluster(pending_each=1)).current
    result = assemble(current.model, now=NOW, config_doc=inputs.config_doc, given=inputs.given("default", {}))
    assert [p.field for p in result.problems] == ["spec.reservationNamespace"]
    assert "SHOAL_RESERVATION_NAMESPACE" in result.problems[0].message
    assert result.snapshot.config.reservation_namespace == "gpu-reserve"  # the setting, never the document's

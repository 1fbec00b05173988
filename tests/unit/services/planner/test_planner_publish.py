"""The planner publishes a plan and its decisions together, and counts the revision only once all are out."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from services.planner.handlers import Planner
from services.snapshotter.translate import Shards
from shoal.adapters.kafka import Delivery
from shoal.adapters.latest_value import Versioned
from shoal.adapters.shard_snapshots import Current
from shoal.messages.base import Meta, new_meta
from shoal.messages.plan import FairShareComputed
from shoal.messages.snapshot import SnapshotPublished
from shoal.metrics import Metrics

NOW = "2026-01-01T00:00:00Z"
DELIVERY = Delivery(topic="snapshots", partition=0, offset=0, key=None, headers=(), timestamp_ms=0)
QUEUE = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
         "spec": {"resources": {"gpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}}


def pending_pod(i: int) -> list[dict]:
    """A one-GPU pod and its PodGroup; with no node in the shard it is unschedulable (a decision per group)."""
    return [{"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": f"pg{i}", "namespace": "ns"}, "spec": {"minMember": 1, "queue": "q"}},
            {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}", "annotations": {"pod-group-name": f"pg{i}"},
                          "labels": {"kai.scheduler/queue": "q"}},
             "spec": {"schedulerName": "shoal-scheduler",
                      "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]},
             "status": {"phase": "Pending"}}]


class Snapshots:
    """The objects as the snapshotter's typed model of shard "default", at `revision`."""

    def __init__(self, revision: int, objects: tuple[dict, ...]):
        shards = Shards("shoal-scheduler", fixed=("default",), now=lambda: NOW)
        for obj in objects:
            assert shards.update(obj) is None
        self.current = Current(revision=revision, chain="c", taken_at=NOW, model=shards.model("default"))

    async def read(self, shard):
        return self.current


class NoFairShare:
    async def get(self, shard):
        return None


class InFlight:
    async def all(self, shard):
        return []

    async def add(self, shard, entries):
        pass


class Bus:
    """Each publish waits until `need` publishes are in flight at once: sequential awaits never get there."""

    def __init__(self, need: int):
        self.need = need
        self.in_flight = 0
        self.enough = asyncio.Event()
        self.topics: list[str] = []

    async def publish(self, topic, message, *, key=None, headers=None):
        self.in_flight += 1
        if self.in_flight >= self.need:
            self.enough.set()
        await self.enough.wait()
        self.topics.append(topic)
        return 0, len(self.topics)


async def test_plan_and_decisions_are_published_concurrently_then_the_revision_counts():
    objects = (QUEUE, *pending_pod(1), *pending_pod(2))
    bus = Bus(need=3)  # the plan and two unschedulable decisions
    planner = Planner(shard_filter=frozenset(), snapshots=Snapshots(3, objects), fair_shares=NoFairShare(), inflight=InFlight(),
                      bus=bus, metrics=Metrics())
    announced = SnapshotPublished(meta=new_meta("snapshotter", revision=3), shard="pool", revision=3, nodes=0,
                                  pods=2, pending_pods=2)
    await asyncio.wait_for(planner.on_snapshot(announced, DELIVERY), 5)
    assert bus.topics.count("shoal.plans.v1") == 1
    assert bus.topics.count("shoal.decisions.v1") >= 2
    assert planner.progress.revisions == {"pool": 3}


async def test_a_failed_publish_leaves_the_revision_unplanned():

    class Broken:
        async def publish(self, topic, message, *, key=None, headers=None):
            raise ConnectionError("kafka down")

    planner = Planner(shard_filter=frozenset(), snapshots=Snapshots(4, (QUEUE, *pending_pod(1))),
                      fair_shares=NoFairShare(), inflight=InFlight(), bus=Broken(), metrics=Metrics())
    announced = SnapshotPublished(meta=new_meta("snapshotter", revision=4), shard="pool", revision=4, nodes=0,
                                  pods=1, pending_pods=1)
    with pytest.raises(ConnectionError):
        await planner.on_snapshot(announced, DELIVERY)
    assert planner.progress.revisions == {}


class FairShares:
    def __init__(self, value):
        self.value = value

    async def get(self, shard):
        return self.value


def figures(revision: int, seconds_ago: float) -> Versioned[FairShareComputed]:
    """The fairshare service's figures as the planner reads them from Redis (`LatestValue`)."""
    at = (datetime.now(UTC) - timedelta(seconds=seconds_ago)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return Versioned(revision, FairShareComputed(
        meta=Meta(id=f"f{revision}", produced_at=at, producer="fairshare", revision=revision),
        shard="pool", revision=revision, queues=()))


async def test_fair_share_figures_a_busy_shard_outpaces_are_stale_only_once_old(caplog):
    """The fairshare service publishes a shard at most once a second while a busy shard has many revisions a
    second: figures many revisions behind but recent are no news; figures behind and old are, once per period."""
    caplog.set_level("WARNING", logger="services.planner")

    def warnings() -> int:
        return sum(r.getMessage() == "fairshare_stale" for r in caplog.records)

    planner = Planner(shard_filter=frozenset(), snapshots=Snapshots(1, ()), fair_shares=FairShares(figures(100, 0.8)),
                      inflight=InFlight(), bus=Bus(need=0), metrics=Metrics(), fairshare_stale_s=10.0)
    await planner._check_fairshare("pool", 120)  # 20 revisions behind, 0.8 s old: the service's own pace
    assert warnings() == 0
    planner.fair_shares = FairShares(figures(100, 30.0))
    await planner._check_fairshare("pool", 120)
    await planner._check_fairshare("pool", 121)  # still stale: said once per period
    assert warnings() == 1
    planner.fair_shares = FairShares(figures(118, 30.0))
    planner._stale_warned.clear()
    await planner._check_fairshare("pool", 120)  # old but within the revisions allowed
    assert warnings() == 1
    planner.fair_shares = FairShares(None)
    await planner._check_fairshare("pool", 120)  # no figures at all
    assert warnings() == 2


class Plans:
    """Keeps what the planner publishes."""

    def __init__(self) -> None:
        self.messages: list = []

    async def publish(self, topic, message, *, key=None, headers=None):
        self.messages.append((topic, message))
        return 0, len(self.messages)


async def test_the_start_stamp_of_a_podgroup_not_in_the_cluster_is_left_to_the_podgrouper():
    """A bare pod is planned in the PodGroup the podgrouper is making for it; that PodGroup does not exist yet,
    so the plan the binder gets carries no start stamp for it (the podgrouper creates it with the stamp), while a
    PodGroup in the cluster gets its stamp as before."""
    from shoal.core.model import ANNOTATION_LAST_START
    from shoal.core.plan import Annotate, Bind

    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "4", "pods": "110"}}}
    named = pending_pod(1)
    bare = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "solo", "namespace": "ns", "uid": "u-solo", "labels": {"kai.scheduler/queue": "q"}},
            "spec": {"schedulerName": "shoal-scheduler", "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]},
            "status": {"phase": "Pending"}}
    bus = Plans()
    planner = Planner(shard_filter=frozenset(), snapshots=Snapshots(5, (QUEUE, node, *named, bare)),
                      fair_shares=NoFairShare(), inflight=InFlight(), bus=bus, metrics=Metrics())
    announced = SnapshotPublished(meta=new_meta("snapshotter", revision=5), shard="default", revision=5, nodes=1,
                                  pods=2, pending_pods=2)
    await asyncio.wait_for(planner.on_snapshot(announced, DELIVERY), 5)
    [plan] = [m for topic, m in bus.messages if topic == "shoal.plans.v1"]
    assert sorted(op.pod for op in plan.ops if isinstance(op, Bind)) == ["ns/p1", "ns/solo"]
    stamps = [op.pod_group for op in plan.ops if isinstance(op, Annotate) and op.key == ANNOTATION_LAST_START]
    assert stamps == ["ns/pg1"]

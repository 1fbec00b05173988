"""While a backlog's binds land, every revision shows one more pod bound and nothing left to place: after an empty
plan, such a revision is planned at most once per `idle_cycle_s` (5,000 pods: 507 cycles, most of them empty,
each laying thousands of leases over the model). A pod that arrives is planned at once. Such a revision is
left unplanned by the leases read last, without reading them again (each read was thousands of leases)."""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest

from services.planner.handlers import Planner
from services.snapshotter.translate import Shards
from shoal.adapters.shard_snapshots import Current
from shoal.messages.base import new_meta
from shoal.messages.snapshot import InFlightBind, SnapshotPublished
from shoal.metrics import Metrics
from tests.unit.services.planner.test_planner_publish import DELIVERY, NOW, QUEUE, NoFairShare, pending_pod


class Snapshots:
    def __init__(self) -> None:
        self.current: Current | None = None

    def show(self, revision: int, objects: tuple[dict, ...]) -> None:
        shards = Shards("shoal-scheduler", fixed=("default",), now=lambda: NOW)
        for obj in objects:
            shards.update(obj)
        self.current = Current(revision=revision, chain="c", taken_at=NOW, model=shards.model("default"))

    async def read(self, shard):
        return self.current


class Leases:
    def __init__(self) -> None:
        self.entries: list[InFlightBind] = []
        self.reads = 0

    async def all(self, shard):
        self.reads += 1
        return list(self.entries)

    async def add(self, shard, entries):
        pass


class Plans:
    def __init__(self) -> None:
        self.revisions: list[int] = []

    async def publish(self, topic, message, *, key=None, headers=None):
        if topic.endswith("plans.v1"):
            self.revisions.append(message.revision)
        return 0, 0


def leased(*uids: str) -> list[InFlightBind]:
    return [InFlightBind(pod=f"ns/p{u[1:]}", pod_uid=u, node="n0", plan_id="plan-0", expires_at=time.time() + 60)
            for u in uids]


async def announce(planner: Planner, revision: int) -> None:
    message = SnapshotPublished(meta=new_meta("snapshotter", revision=revision), shard="default", revision=revision)
    await asyncio.wait_for(planner.on_snapshot(message, DELIVERY), 5)


def make(idle_cycle_s: float) -> tuple[Planner, Snapshots, Leases, Plans]:
    snapshots, leases, plans = Snapshots(), Leases(), Plans()
    planner = Planner(shard_filter=frozenset(), snapshots=snapshots, fair_shares=NoFairShare(), inflight=leases,
                      bus=plans, metrics=Metrics(), idle_cycle_s=idle_cycle_s)
    return planner, snapshots, leases, plans


async def test_after_an_empty_plan_a_revision_with_every_pending_pod_in_flight_waits_for_the_next_idle_cycle():
    planner, snapshots, leases, plans = make(idle_cycle_s=0.3)
    snapshots.show(1, (QUEUE,))
    await announce(planner, 1)  # nothing pending: an empty plan
    leases.entries = leased("u1")
    snapshots.show(2, (QUEUE, *pending_pod(1)))  # p1's bind is in flight: nothing to place
    await announce(planner, 2)
    assert plans.revisions == [1] and planner.progress.revisions == {"default": 2}
    await asyncio.sleep(0.35)
    snapshots.show(3, (QUEUE, *pending_pod(1)))
    await announce(planner, 3)  # the idle cycle is due: planned
    assert plans.revisions == [1, 3]


@pytest.mark.parametrize(("idle_cycle_s", "first", "second"), [
    (60, (QUEUE,), (QUEUE, *pending_pod(1), *pending_pod(2))),  # p2 arrived, with no bind in flight: at once
    (60, (QUEUE, *pending_pod(1)), (QUEUE, *pending_pod(1))),  # the first plan did something (p1's verdict)
    (0, (QUEUE,), (QUEUE, *pending_pod(1))),  # 0: every revision
], ids=["a-pod-arrives", "after-a-plan-that-did-something", "idle-cycle-0"])
async def test_the_next_revision_is_planned(idle_cycle_s, first, second):
    planner, snapshots, leases, plans = make(idle_cycle_s)
    snapshots.show(1, first)
    await announce(planner, 1)
    leases.entries = leased("u1")
    snapshots.show(2, second)
    await announce(planner, 2)
    assert plans.revisions == [1, 2]


async def test_while_idle_revisions_are_left_by_the_leases_read_last_until_the_idle_cycle():
    planner, snapshots, leases, plans = make(idle_cycle_s=0.5)
    leases.entries = leased("u1")
    snapshots.show(1, (QUEUE, *pending_pod(1)))
    await announce(planner, 1)  # p1's bind in flight, but no empty plan yet: planned, empty
    assert plans.revisions == [1] and leases.reads == 1
    leases.entries = []  # p1's bind failed: the binder dropped its lease
    for revision in (2, 3, 4):
        snapshots.show(revision, (QUEUE, *pending_pod(1)))
        await announce(planner, revision)
    assert plans.revisions == [1] and leases.reads == 1 and planner.progress.revisions == {"default": 4}
    await asyncio.sleep(0.55)
    snapshots.show(5, (QUEUE, *pending_pod(1)))
    await announce(planner, 5)  # the idle cycle: leases read, p1 planned again
    assert plans.revisions == [1, 5] and leases.reads == 2


@pytest.mark.parametrize("change", ["a-pod-arrives", "the-lease-ran-out"])
async def test_leases_are_read_again_when_the_ones_read_last_do_not_cover_the_revision(change):
    planner, snapshots, leases, plans = make(idle_cycle_s=60)
    leases.entries = leased("u1")
    if change == "the-lease-ran-out":
        leases.entries = [msgspec.structs.replace(leases.entries[0], expires_at=time.time() + 0.3)]
    snapshots.show(1, (QUEUE, *pending_pod(1)))
    await announce(planner, 1)
    assert leases.reads == 1
    if change == "a-pod-arrives":
        snapshots.show(2, (QUEUE, *pending_pod(1), *pending_pod(2)))
    else:
        await asyncio.sleep(0.35)
        snapshots.show(2, (QUEUE, *pending_pod(1)))
    await announce(planner, 2)
    assert leases.reads == 2 and plans.revisions == [1, 2]

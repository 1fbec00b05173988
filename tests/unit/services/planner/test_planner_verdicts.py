"""A pending verdict goes out on the decision stream once, when it changes (services.planner.verdicts), and a
planner that restarts or takes the shard over goes on from what was published (the store is shared)."""

from __future__ import annotations

import asyncio

from services.planner.handlers import Planner
from services.planner.verdicts import verdict_changes
from shoal.adapters.verdicts import Verdict
from shoal.core.plan import Bind, ClearCondition, Pipeline, Plan, SetCondition
from shoal.messages.base import new_meta
from shoal.messages.snapshot import SnapshotPublished
from shoal.metrics import Metrics
from tests.unit.services.planner.test_planner_publish import (
    DELIVERY,
    QUEUE,
    InFlight,
    NoFairShare,
    Snapshots,
    pending_pod,
)

GANG = "Resources were found for 4 pods while 5 are required for gang scheduling"


def plan(*ops) -> Plan:  # type: ignore[no-untyped-def]
    return Plan(plan_id="p", revision=1, ops=tuple(ops))


def cond(pg: str, reason: str = "PodSchedulingErrors", message: str = GANG) -> SetCondition:
    return SetCondition(pod_group=pg, reason=reason, message=message)


def known(pg: str, reason: str = "PodSchedulingErrors", message: str = GANG, at: float = 100.0) -> dict:
    return {pg: Verdict(reason=reason, message=message, published_s=at)}


def test_a_new_verdict_is_published_and_remembered() -> None:
    out = verdict_changes(plan(cond("ns/a")), {}, pod_groups=["ns/a"], now_s=100, reassert_s=600)
    assert out.publish == {"ns/a"}
    assert out.store == {"ns/a": Verdict(reason="PodSchedulingErrors", message=GANG, published_s=100)}
    assert out.drop == frozenset()


def test_an_unchanged_verdict_is_not_published_again_until_the_reassertion_is_due() -> None:
    before = known("ns/a", at=100.0)
    quiet = verdict_changes(plan(cond("ns/a")), before, pod_groups=["ns/a"], now_s=699, reassert_s=600)
    assert quiet.publish == frozenset() and quiet.store == {} and quiet.drop == frozenset()
    due = verdict_changes(plan(cond("ns/a")), before, pod_groups=["ns/a"], now_s=700, reassert_s=600)
    assert due.publish == {"ns/a"} and due.store["ns/a"].published_s == 700
    never = verdict_changes(plan(cond("ns/a")), before, pod_groups=["ns/a"], now_s=1e9, reassert_s=0)
    assert never.publish == frozenset()


def test_a_new_reason_or_message_is_published() -> None:
    before = known("ns/a")
    reason = verdict_changes(plan(cond("ns/a", reason="OverLimit")), before, pod_groups=["ns/a"], now_s=101,
                             reassert_s=0)
    message = verdict_changes(plan(cond("ns/a", message=GANG.replace("4 pods", "3 pods"))), before,
                              pod_groups=["ns/a"], now_s=101, reassert_s=0)
    assert reason.publish == {"ns/a"} and reason.store["ns/a"].reason == "OverLimit"
    assert message.publish == {"ns/a"} and "3 pods" in message.store["ns/a"].message


def test_a_group_that_is_placed_cleared_or_gone_is_forgotten_so_its_next_verdict_is_news() -> None:
    before = {**known("ns/bound"), **known("ns/piped"), **known("ns/clear"), **known("ns/gone"),
              **known("ns/quiet")}
    ops = (Bind(pod="ns/b-0", pod_uid="u", node="n1", pod_group="ns/bound"),
           Pipeline(pod="ns/p-0", pod_uid="v", node="n1", pod_group="ns/piped"), ClearCondition(pod_group="ns/clear"))
    out = verdict_changes(plan(*ops), before, pod_groups=["ns/bound", "ns/piped", "ns/clear", "ns/quiet"],
                          now_s=101, reassert_s=0)
    # ns/quiet had no verdict this cycle but is still there and was not placed: its entry stays
    assert out.drop == {"ns/bound", "ns/piped", "ns/clear", "ns/gone"}
    assert out.publish == frozenset()
    again = verdict_changes(plan(cond("ns/bound")), {"ns/quiet": before["ns/quiet"]}, pod_groups=["ns/bound"],
                            now_s=102, reassert_s=0)
    assert again.publish == {"ns/bound"}


class Store:
    """PublishedVerdicts in memory (the Redis one is exercised end to end)."""

    def __init__(self) -> None:
        self.hash: dict[str, dict[str, Verdict]] = {}

    async def all(self, shard):
        return dict(self.hash.get(shard, {}))

    async def update(self, shard, store, drop):
        entries = self.hash.setdefault(shard, {})
        entries.update(store)
        for pg in drop:
            if pg not in store:
                entries.pop(pg, None)


class Bus:
    def __init__(self) -> None:
        self.unschedulable: list[str] = []

    async def publish(self, topic, message, *, key=None, headers=None):
        if getattr(message, "type", "") == "io.shoal.decision.unschedulable":
            self.unschedulable.append(message.subject)
        return 0, 0


def planner(store: Store, bus: Bus, revision: int) -> Planner:
    return Planner(shard_filter=frozenset(), snapshots=Snapshots(revision, (QUEUE, *pending_pod(1))),
                   fair_shares=NoFairShare(), inflight=InFlight(), bus=bus, metrics=Metrics(), verdicts=store)


async def cycle(p: Planner, revision: int) -> None:
    announced = SnapshotPublished(meta=new_meta("snapshotter", revision=revision), shard="pool", revision=revision,
                                  nodes=0, pods=1, pending_pods=1)
    p.snapshots = Snapshots(revision, (QUEUE, *pending_pod(1)))
    await asyncio.wait_for(p.on_snapshot(announced, DELIVERY), 5)


async def test_cycles_and_a_restarted_planner_publish_the_verdict_once() -> None:
    store, bus = Store(), Bus()
    first = planner(store, bus, 1)
    for revision in (1, 2, 3):
        await cycle(first, revision)
    assert bus.unschedulable == ["ns/pg1"]
    second = planner(store, bus, 4)  # a restart, or another planner taking the shard over
    for revision in (4, 5):
        await cycle(second, revision)
    assert bus.unschedulable == ["ns/pg1"]
    assert set(store.hash["pool"]) == {"ns/pg1"}


async def test_without_a_store_every_cycle_publishes_its_verdicts() -> None:
    bus = Bus()
    p = Planner(shard_filter=frozenset(), snapshots=Snapshots(1, (QUEUE, *pending_pod(1))), fair_shares=NoFairShare(),
                inflight=InFlight(), bus=bus, metrics=Metrics())
    for revision in (1, 2):
        await cycle(p, revision)
    assert bus.unschedulable == ["ns/pg1", "ns/pg1"]


def test_snapshot_groups_finds_exactly_the_snapshots_pod_groups():
    from services.planner.verdicts import SnapshotGroups
    from shoal.core.model import PodGroup, make_snapshot

    groups = [PodGroup(namespace=ns, name=name, uid=f"{ns}-{name}", queue="q")
              for ns, name in (("a", "x"), ("a", "x-1"), ("a-b", "x"), ("b", "a/b"), ("b", "y"))]
    present = SnapshotGroups(make_snapshot(pod_groups=reversed(groups)).pod_groups)
    assert all(g.key in present for g in groups)
    assert not any(k in present for k in ("a/y", "a-b/y", "b/a", "c/x", "", "a", "ax", None))

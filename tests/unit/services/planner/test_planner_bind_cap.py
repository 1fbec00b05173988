"""A cycle that stops at the bind cap is followed at once by the next, on the same revision with its binds in
flight, until the backlog is placed: one announcement, several plans, every pod leased once."""

from __future__ import annotations

import pytest

from services.planner.handlers import Planner
from shoal.core.plan import Bind
from shoal.messages.snapshot import InFlightBind
from shoal.metrics import Metrics
from tests.unit.services.planner.test_planner_idle import Snapshots, announce
from tests.unit.services.planner.test_planner_publish import QUEUE, NoFairShare, pending_pod

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "8", "pods": "110"}}}


class Leases:
    """The shard's in-flight hash, in memory: what one cycle adds the next reads."""

    def __init__(self) -> None:
        self.entries: dict[str, InFlightBind] = {}

    async def all(self, shard):
        return list(self.entries.values())

    async def add(self, shard, entries):
        for e in entries:
            assert e.pod_uid not in self.entries, f"{e.pod} planned twice"
            self.entries[e.pod_uid] = e


class Plans:
    def __init__(self) -> None:
        self.binds: list[list[str]] = []
        self.revisions: list[int] = []

    async def publish(self, topic, message, *, key=None, headers=None):
        if topic.endswith("plans.v1"):
            self.binds.append(sorted(op.pod for op in message.ops if isinstance(op, Bind)))
            self.revisions.append(message.revision)
        return 0, 0


@pytest.mark.parametrize(("bind_cap", "plans"), [(2, [2, 2, 1]), (5, [5]), (0, [5])])
async def test_a_backlog_past_the_cap_is_planned_in_cycles_that_follow_each_other_at_once(bind_cap, plans):
    snapshots, leases, bus = Snapshots(), Leases(), Plans()
    planner = Planner(shard_filter=frozenset(), snapshots=snapshots, fair_shares=NoFairShare(), inflight=leases,
                      bus=bus, metrics=Metrics(), bind_cap=bind_cap)
    snapshots.show(1, (QUEUE, NODE, *(obj for i in range(5) for obj in pending_pod(i))))
    await announce(planner, 1)
    assert [len(b) for b in bus.binds] == plans
    assert bus.revisions == [1] * len(plans)
    assert sorted(p for b in bus.binds for p in b) == [f"ns/p{i}" for i in range(5)]
    assert sorted(leases.entries) == [f"u{i}" for i in range(5)]
    assert planner.progress.revisions == {"default": 1}
    capped = planner.metrics.registry.get_sample_value("shoal_planner_cycles_capped_total", {"shard": "default"})
    assert (capped or 0) == len(plans) - 1
    await announce(planner, 1)  # the revision is planned: a repeat of its announcement plans nothing
    assert len(bus.binds) == len(plans)


async def test_capped_cycles_whose_leases_do_not_hold_stop_after_a_bounded_number(monkeypatch):
    """Leases that run out at once (SHOAL_INFLIGHT_TTL_S=0) would have every capped cycle plan the same pods: the
    repeats after one announcement are bounded, and the next revision goes on."""
    import services.planner.handlers as handlers

    monkeypatch.setattr(handlers, "MAX_CAPPED_REPEATS", 3)
    snapshots, leases, bus = Snapshots(), Leases(), Plans()

    async def forget(shard, entries):  # nothing is ever in flight
        return None

    leases.add = forget
    planner = Planner(shard_filter=frozenset(), snapshots=snapshots, fair_shares=NoFairShare(), inflight=leases,
                      bus=bus, metrics=Metrics(), bind_cap=2)
    snapshots.show(1, (QUEUE, NODE, *(obj for i in range(5) for obj in pending_pod(i))))
    await announce(planner, 1)
    assert len(bus.binds) == 4 and all(b == bus.binds[0] for b in bus.binds)

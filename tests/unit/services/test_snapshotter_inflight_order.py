"""The snapshotter drops a settled in-flight entry only after the snapshot showing the pod bound is stored.

Removed before, a planner could read the in-flight hash without the entry and then the previous snapshot
with the pod still unbound, and book the pod's resources a second time (seen after a Kafka restart, when
many binds landed while the stored snapshot was old: a node got 9 whole-GPU pods on 8 GPUs).
"""

from __future__ import annotations

import time

from services.snapshotter.handlers import Snapshotter
from shoal.messages.snapshot import InFlightBind
from shoal.metrics import Metrics


def node(name: str) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {"kai.scheduler/node-pool": "p"}}}


def pod(name: str, uid: str, node_name: str = "") -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": uid,
                                        "labels": {"kai.scheduler/node-pool": "p"}},
            "spec": {"schedulerName": "shoal-scheduler", "nodeName": node_name}, "status": {"phase": "Pending"}}


class Journal(list):
    pass


class FakeMirror:
    def __init__(self, objects: list[dict]) -> None:
        self.objects = objects

    def all(self) -> list[dict]:
        return list(self.objects)


class FakeInFlight:
    def __init__(self, journal: Journal, entries: list[InFlightBind]) -> None:
        self.journal, self.entries = journal, {e.pod_uid: e for e in entries}

    async def all(self, shard: str) -> list[InFlightBind]:
        return list(self.entries.values())

    async def remove(self, shard: str, uids: list[str]) -> int:
        self.journal.append(("remove", sorted(uids)))
        return sum(self.entries.pop(u, None) is not None for u in uids)


class FakeStore:
    def __init__(self, journal: Journal, accept: bool = True) -> None:
        self.journal, self.accept = journal, accept

    async def latest_revision(self, shard: str) -> int:
        return 0

    async def publish(self, shard: str, revision: int, snap: object) -> bool:
        self.journal.append(("store", revision, tuple(e.pod_uid for e in snap.inflight)))
        return self.accept


class FakeBus:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    async def publish(self, topic: str, message: object, *, key: str) -> tuple[int, int]:
        self.journal.append(("announce", topic))
        return 0, 0


def entry(uid: str, *, expires_in_s: float = 60.0) -> InFlightBind:
    return InFlightBind(pod=f"ns/{uid}", pod_uid=uid, node="n1", plan_id="p1",
                        expires_at=time.time() + expires_in_s)


def snapshotter(journal: Journal, *, accept: bool = True) -> tuple[Snapshotter, FakeInFlight]:
    objects = [node("n1"), pod("bound", "u-bound", "n1"), pod("waiting", "u-waiting")]
    inflight = FakeInFlight(journal, [entry("u-bound"), entry("u-waiting"), entry("u-gone")])
    snap = Snapshotter(mirror=FakeMirror(objects), store=FakeStore(journal, accept), inflight=inflight,
                       bus=FakeBus(journal), metrics=Metrics())
    return snap, inflight


async def test_settled_entries_are_removed_after_the_snapshot_is_stored() -> None:
    journal = Journal()
    snap, inflight = snapshotter(journal)

    await snap.publish("p", list(snap.mirror.all()))

    kinds = [step[0] for step in journal]
    assert kinds.index("store") < kinds.index("remove") < kinds.index("announce")
    assert journal[kinds.index("store")][2] == ("u-waiting",)  # the snapshot carries the live entry only
    assert journal[kinds.index("remove")][1] == ["u-bound", "u-gone"]
    assert set(inflight.entries) == {"u-waiting"}


async def test_nothing_is_removed_when_the_snapshot_is_not_stored() -> None:
    journal = Journal()
    snap, inflight = snapshotter(journal, accept=False)

    await snap.publish("p", list(snap.mirror.all()))

    assert [step[0] for step in journal] == ["store"]
    assert len(inflight.entries) == 3


async def test_a_kafka_outage_does_not_end_the_snapshot_loop() -> None:
    """An announcement that fails (transient) is logged and the loop publishes again next period."""
    import asyncio

    from shoal.errors import TransientError

    journal = Journal()
    snap, _ = snapshotter(journal)
    snap.period_s = 0.01
    calls = 0

    async def flaky() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise TransientError("kafka: [Error 5] LeaderNotAvailableError")

    async def synced() -> None:
        return None

    from types import SimpleNamespace

    snap.mirror = SimpleNamespace(objects={}, wait_synced=synced, all=list)  # type: ignore[assignment]
    snap.publish_all = flaky  # type: ignore[method-assign]
    snap.mark_dirty()
    loop = asyncio.create_task(snap.run())
    for _ in range(200):
        if calls >= 2:
            break
        await asyncio.sleep(0.01)
    assert not loop.done(), "the loop ended on a transient publish failure"
    loop.cancel()
    assert calls >= 2

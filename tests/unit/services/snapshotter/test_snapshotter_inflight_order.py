"""The snapshotter's publishing rules, with the Redis writer, in-flight hash and bus replaced by journals.

A settled in-flight entry is dropped only after the revision showing the pod bound is stored: removed before,
a planner could read the in-flight hash without the entry and then the previous revision with the pod still
unbound, and book the pod's resources a second time (seen after a Kafka restart, when many binds landed while
the stored snapshot was old: a node got 9 whole-GPU pods on 8 GPUs). Also: the first revision is a base, the
next ones deltas with only what changed, a watch event that changes nothing the core reads wakes nothing, and
events that keep coming still publish within `max_delay_s`.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from services.snapshotter.handlers import Snapshotter
from services.snapshotter.translate import Shards
from shoal.errors import TransientError
from shoal.messages.snapshot import InFlightBind
from shoal.metrics import Metrics

NOW = "2026-01-01T00:00:00Z"


def node(name: str) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {"kai.scheduler/node-pool": "p"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


def pod(name: str, uid: str, node_name: str = "") -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": uid,
                                        "labels": {"kai.scheduler/node-pool": "p"}},
            "spec": {"schedulerName": "shoal-scheduler", "nodeName": node_name}, "status": {"phase": "Pending"}}


class Journal(list):
    pass


class FakeInFlight:
    def __init__(self, journal: Journal, entries: list[InFlightBind]) -> None:
        self.journal, self.entries = journal, {e.pod_uid: e for e in entries}
        self.reads: list[object] = []  # "all", or the uids asked for

    async def all(self, shard: str) -> list[InFlightBind]:
        self.reads.append("all")
        return list(self.entries.values())

    async def get_many(self, shard: str, uids: list[str]) -> dict[str, InFlightBind]:
        self.reads.append(sorted(uids))
        return {u: self.entries[u] for u in uids if u in self.entries}

    async def remove(self, shard: str, uids: set[str]) -> int:
        self.journal.append(("remove", sorted(uids)))
        return sum(self.entries.pop(u, None) is not None for u in uids)


class FakeWriter:
    def __init__(self, journal: Journal, accept: bool = True) -> None:
        self.journal, self.accept, self.latest = journal, accept, 0

    async def latest_revision(self, shard: str) -> int:
        return self.latest

    async def publish_base(self, shard, revision, entries, *, taken_at, require_podgroup=False):  # type: ignore[no-untyped-def]
        self.journal.append(("base", revision, len(entries.pods)))
        if not self.accept:
            return None
        self.latest = revision
        return "chain", 1000

    async def publish_delta(self, shard, revision, changes, *, chain, taken_at, require_podgroup=False):  # type: ignore[no-untyped-def]
        self.journal.append(("delta", revision, [p.pod.name for p in changes.upserts.pods]))
        self.latest = revision
        return 10


class FakeBus:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    async def publish(self, topic: str, message: object, *, key: str) -> tuple[int, int]:
        self.journal.append(("announce", message.revision))  # type: ignore[attr-defined]
        return 0, 0


def entry(uid: str, *, expires_in_s: float = 60.0) -> InFlightBind:
    return InFlightBind(pod=f"ns/{uid}", pod_uid=uid, node="n1", plan_id="p1",
                        expires_at=time.time() + expires_in_s)


def snapshotter(journal: Journal, *, accept: bool = True) -> tuple[Snapshotter, FakeInFlight]:
    objects = [node("n1"), pod("bound", "u-bound", "n1"), pod("waiting", "u-waiting")]
    mirror = SimpleNamespace(objects={"Pod": {o["metadata"]["uid"]: o for o in objects if o["kind"] == "Pod"}})
    inflight = FakeInFlight(journal, [entry("u-bound"), entry("u-waiting"), entry("u-gone")])
    snap = Snapshotter(mirror=mirror, shards=Shards("shoal-scheduler", now=lambda: NOW),  # type: ignore[arg-type]
                       writer=FakeWriter(journal, accept), inflight=inflight, bus=FakeBus(journal),  # type: ignore[arg-type]
                       metrics=Metrics())
    for obj in objects:
        snap.on_change(obj, False)
    return snap, inflight


async def test_settled_entries_are_removed_after_the_revision_is_stored() -> None:
    journal = Journal()
    snap, inflight = snapshotter(journal)
    await snap.publish("p")
    kinds = [step[0] for step in journal]
    assert kinds.index("base") < kinds.index("remove") < kinds.index("announce")
    assert journal[kinds.index("remove")][1] == ["u-bound", "u-gone"]
    assert set(inflight.entries) == {"u-waiting"}


async def test_between_sweeps_only_the_leases_of_pods_that_settled_are_read() -> None:
    """After the first revision reads the whole hash, a revision reads the leases of the pods bound, deleting
    or gone since, and still removes them only after it is stored; a lease its pod settled before it was seen
    (no event to point at it) and one that expired wait for the next whole read, `sweep_s` later."""
    journal = Journal()
    snap, inflight = snapshotter(journal)
    snap.sweep_s = 3600.0
    await snap.publish("p")
    assert inflight.reads == ["all"] and set(inflight.entries) == {"u-waiting"}
    inflight.entries.update({"u-early": entry("u-early"), "u-old": entry("u-old", expires_in_s=-1),
                             "u-victim": entry("u-victim")})
    inflight.entries["u-victim"] = InFlightBind(pod="ns/victim", pod_uid="u-victim", node="n1", plan_id="p1",
                                                expires_at=time.time() + 60, eviction=True)
    for obj in (pod("early", "u-early", "n1"), pod("victim", "u-victim", "n1")):
        snap.mirror.objects["Pod"][obj["metadata"]["uid"]] = obj
    snap.on_change(pod("other", "u-other"), False)  # pending: nothing to check
    journal.clear()
    await snap.publish("p")
    assert inflight.reads[-1] == [] and len(inflight.entries) == 4

    bound = pod("waiting", "u-waiting", "n1")
    snap.mirror.objects["Pod"]["u-waiting"] = bound
    snap.on_change(bound, False)
    deleting = pod("victim", "u-victim", "n1")
    deleting["metadata"]["deletionTimestamp"] = NOW
    snap.mirror.objects["Pod"]["u-victim"] = deleting
    snap.on_change(deleting, False)
    journal.clear()
    await snap.publish("p")
    assert inflight.reads[-1] == ["u-victim", "u-waiting"]
    kinds = [step[0] for step in journal]
    assert kinds.index("delta") < kinds.index("remove") < kinds.index("announce")
    assert journal[kinds.index("remove")][1] == ["u-victim", "u-waiting"]
    assert set(inflight.entries) == {"u-early", "u-old"}

    snap.sweep_s = 0.0
    await snap.publish("p")
    assert inflight.reads[-1] == "all" and inflight.entries == {}


async def test_a_failed_revision_leaves_its_leases_to_the_next_sweep() -> None:
    journal = Journal()
    snap, inflight = snapshotter(journal)
    snap.sweep_s = 3600.0
    await snap.publish("p")
    bound = pod("waiting", "u-waiting", "n1")
    snap.mirror.objects["Pod"]["u-waiting"] = bound
    snap.on_change(bound, False)

    async def refuse(*args: object, **kwargs: object) -> None:
        raise TransientError("redis down")

    snap.writer.publish_delta = refuse  # type: ignore[method-assign]
    with pytest.raises(TransientError):
        await snap.publish("p")
    assert "u-waiting" in inflight.entries
    snap.writer = FakeWriter(journal)
    snap.writer.latest = 1
    snap.sweep_s = 0.0
    await snap.publish("p")
    assert inflight.reads[-1] == "all" and "u-waiting" not in inflight.entries


async def test_nothing_is_removed_when_the_revision_is_not_stored() -> None:
    journal = Journal()
    snap, inflight = snapshotter(journal, accept=False)
    with pytest.raises(TransientError):
        await snap.publish("p")
    assert {step[0] for step in journal} == {"base"}
    assert len(inflight.entries) == 3


async def test_the_first_revision_is_a_base_then_deltas_carry_only_what_changed() -> None:
    journal = Journal()
    snap, _ = snapshotter(journal)
    await snap.publish_all()
    assert journal[0] == ("base", 1, 2)
    snap.dirty.clear()  # as the publishing loop does
    heartbeat = pod("waiting", "u-waiting")
    heartbeat["status"]["conditions"] = [{"type": "PodScheduled", "status": "False"}]  # nothing the core reads
    snap.on_change(heartbeat, False)
    assert not snap.dirty.is_set() and snap.shards.changed() == []
    snap.on_change(pod("new", "u-new"), False)
    assert snap.dirty.is_set()
    journal.clear()
    await snap.publish_all()
    assert journal[0] == ("delta", 2, ["new"]) and journal[-1] == ("announce", 2)


async def test_events_that_keep_coming_still_publish_within_the_maximum_delay() -> None:
    journal = Journal()
    snap, _ = snapshotter(journal)
    # margins wide enough that a loaded machine's scheduling stalls (tens of ms) never look like a pause
    snap.debounce_s, snap.max_delay_s = 0.3, 0.6

    async def keep_changing() -> None:
        for i in range(1000):
            snap.on_change(pod(f"p{i}", f"u{i}"), False)
            await asyncio.sleep(0.01)

    changes = asyncio.create_task(keep_changing())
    started = time.monotonic()
    await snap._settle()
    waited = time.monotonic() - started
    changes.cancel()
    assert 0.5 <= waited < 3.0  # not before the cap (events never paused 300 ms), not much after it


async def test_a_kafka_outage_does_not_end_the_snapshot_loop() -> None:
    """An announcement that fails (transient) is logged and the loop publishes again."""
    journal = Journal()
    snap, _ = snapshotter(journal)
    snap.heartbeat_s = 0.01
    calls = 0

    async def flaky() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise TransientError("kafka: [Error 5] LeaderNotAvailableError")

    async def synced() -> None:
        return None

    snap.mirror = SimpleNamespace(objects={}, wait_synced=synced)  # type: ignore[assignment]
    snap.publish_all = flaky  # type: ignore[method-assign]
    loop = asyncio.create_task(snap.run())
    for _ in range(300):
        if calls >= 2:
            break
        await asyncio.sleep(0.01)
    assert not loop.done(), "the loop ended on a transient publish failure"
    loop.cancel()
    assert calls >= 2


async def test_a_shard_that_is_gone_does_not_make_the_loop_spin() -> None:
    """A shard announced once whose nodes are gone is never due again: the wait is the heartbeat, not 0."""
    journal = Journal()
    snap, _ = snapshotter(journal)
    await snap.publish_all()
    snap.announced["gone-pool"] = time.monotonic() - 3600  # announced long ago, no node now
    assert snap._until_heartbeat() > snap.heartbeat_s - 1
    assert "gone-pool" not in snap.announced


async def test_after_a_redis_flush_revisions_go_on_and_planners_take_a_new_chain_even_if_lower() -> None:
    from shoal.adapters.shard_snapshots import Progress

    journal = Journal()
    snap, _ = snapshotter(journal)
    await snap.publish_all()
    snap.on_change(pod("new", "u-new"), False)
    await snap.publish_all()
    assert snap.chains["p"].revision == 2
    snap.writer.latest = 0  # Redis flushed: nothing stored, the delta cannot continue the chain
    snap.writer.publish_delta = lambda *a, **k: _none()  # type: ignore[method-assign]
    snap.on_change(pod("newer", "u-newer"), False)
    await snap.publish_all()
    assert journal[-1] == ("announce", 3) and ("base", 3, 4) in journal  # a base, numbered after 2, not 1

    progress = Progress()
    progress.mark("p", 40, "chain-a")
    assert progress.handled("p", 39, "chain-a") and progress.handled("p", 39, "")
    assert not progress.handled("p", 3, "chain-b")  # another history: planned, whatever its number


async def _none() -> None:
    return None

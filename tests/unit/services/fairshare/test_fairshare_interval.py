"""The fairshare service computes a shard's figures at most once per `min_interval_s`, from the newest revision:
announcements now come every few tens of milliseconds, and the published view does not need each one."""

from __future__ import annotations

import asyncio
import time

from services.fairshare.handlers import FairShare
from services.snapshotter.translate import Shards
from shoal.adapters.kafka import Delivery
from shoal.adapters.shard_snapshots import Current
from shoal.messages.base import new_meta
from shoal.messages.snapshot import SnapshotPublished
from shoal.metrics import Metrics

NOW = "2026-01-01T00:00:00Z"
DELIVERY = Delivery(topic="snapshots", partition=0, offset=0, key=None, headers=(), timestamp_ms=0)


class Snapshots:
    def __init__(self) -> None:
        self.current = Current(revision=0, chain="c", taken_at=NOW,
                               model=Shards("shoal-scheduler", fixed=("pool",)).model("pool"))
        self.reads = 0

    async def read(self, shard):
        self.reads += 1
        return self.current


class Results:
    def __init__(self) -> None:
        self.revisions: list[int] = []

    async def put(self, shard, revision, value):
        self.revisions.append(revision)
        return True


class Bus:
    async def publish(self, topic, message, *, key=None, headers=None):
        return 0, 0


def announced(revision: int, chain: str = "") -> SnapshotPublished:
    return SnapshotPublished(meta=new_meta("snapshotter", revision=revision), shard="pool", revision=revision,
                             chain=chain)


async def test_announcements_within_the_interval_are_one_computation_of_the_newest_revision():
    snapshots, results = Snapshots(), Results()
    service = FairShare(snapshots=snapshots, results=results, bus=Bus(), metrics=Metrics(), min_interval_s=0.3)
    snapshots.current.revision = 1
    await service.on_snapshot(announced(1), DELIVERY)
    started = time.monotonic()
    snapshots.current.revision = 5  # four more revisions arrive while the interval runs
    await asyncio.gather(*(service.on_snapshot(announced(r), DELIVERY) for r in (2, 3)))
    assert time.monotonic() - started >= 0.25  # waited for the interval, not computed at once
    assert results.revisions == [1, 5]  # once for revision 1, then once for the newest


async def test_a_backlog_of_an_older_chain_is_skipped_without_waiting_once_the_newest_is_computed():
    # found by `shoal bench soak`: the snapshotter starts a new chain at every base (every few seconds under churn);
    # announcements of the chain before it are never "handled" by revision, and each one waited out the interval
    # before finding the newest revision computed: one announcement a second, fewer than arrive, so the
    # consumer's lag grew without bound (~1 message/s, no fault needed)
    snapshots, results = Snapshots(), Results()
    service = FairShare(snapshots=snapshots, results=results, bus=Bus(), metrics=Metrics(), min_interval_s=0.5)
    snapshots.current = Current(revision=12, chain="new", taken_at=NOW, model=snapshots.current.model)
    await service.on_snapshot(announced(12, chain="new"), DELIVERY)
    started = time.monotonic()
    for revision in range(3, 11):  # the older chain's announcements, still in the partition behind the base
        await service.on_snapshot(announced(revision, chain="old"), DELIVERY)
    assert time.monotonic() - started < 0.25, "each stale announcement waited for the interval"
    assert results.revisions == [12]
    snapshots.current = Current(revision=13, chain="new", taken_at=NOW, model=snapshots.current.model)
    started = time.monotonic()
    await service.on_snapshot(announced(13, chain="new"), DELIVERY)  # a new revision still waits its turn
    assert time.monotonic() - started >= 0.25 and results.revisions == [12, 13]

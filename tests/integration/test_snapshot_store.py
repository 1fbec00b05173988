"""Typed shard snapshots and latest values against a real Redis: bases in parts, deltas that follow them,
writers that race, readers that follow or re-read, expiry of superseded chains."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import msgspec
import pytest
from redis.asyncio import Redis

from shoal.adapters import redis_keys
from shoal.adapters.dedup import SeenIds
from shoal.adapters.latest_value import LatestValue, Versioned
from shoal.adapters.redis_client import connect_redis, redis_ready
from shoal.adapters.shard_snapshots import SnapshotReader, SnapshotWriter
from shoal.core.ingest.shard_model import Changes, Entries, PodEntry, Removed, ShardModel
from shoal.core.model import Node, Pod
from shoal.settings import RedisSettings

NOW = "2026-01-01T00:00:00Z"


class Shares(msgspec.Struct, frozen=True):
    by_queue: dict[str, int]


def node(i: int, gpus: int = 8) -> Node:
    return Node(name=f"n{i}", gpus=gpus)


def pod_entry(i: int, node_name: str | None = None) -> PodEntry:
    return PodEntry(pod=Pod(uid=f"u{i}", namespace="ns", name=f"p{i}", pod_group=f"pg{i}", gpus=1,
                            node_name=node_name))


def model_of(*, nodes: int, pods: int) -> ShardModel:
    return ShardModel.of(Entries(nodes=tuple(node(i) for i in range(nodes)),
                                 pods=tuple(pod_entry(i) for i in range(pods))))


async def test_a_reader_follows_deltas_and_reads_a_base_only_when_it_must(redis: Redis, node_pool: str) -> None:
    assert await redis_ready(redis)
    writer, reader = SnapshotWriter(redis), SnapshotReader(redis)
    assert await reader.read(node_pool) is None
    model = model_of(nodes=3, pods=9_000)  # pods in 3 parts
    stored = await writer.publish_base(node_pool, 1, model.entries(), taken_at=NOW, require_podgroup=True)
    assert stored is not None
    chain, size = stored
    assert await redis.get(redis_keys.snapshot_base_latest(node_pool)) == b"1"
    assert await redis.exists(redis_keys.snapshot_base_part(node_pool, 1, 2)) == 1
    first = await reader.read(node_pool)
    assert first is not None and first.revision == 1 and first.require_podgroup and first.model == model
    for revision in (2, 3):
        change = Changes(upserts=Entries(pods=(pod_entry(revision, node_name="n0"),)),
                         removed=Removed(nodes=(f"n{revision - 1}",)))
        model.apply(change)
        written = await writer.publish_delta(node_pool, revision, change, chain=chain, taken_at=NOW)
        assert written is not None and written < size // 1000  # a delta is tiny next to the base
    assert await writer.publish_delta(node_pool, 3, Changes(), chain=chain, taken_at=NOW) is None  # not the next
    assert await writer.publish_delta(node_pool, 5, Changes(), chain=chain, taken_at=NOW) is None  # a gap
    current = await reader.read(node_pool)
    assert current is not None and current.revision == 3 and current.model == model
    assert (reader.bases_read, reader.deltas_read) == (1, 2)
    fresh = await SnapshotReader(redis).read(node_pool)  # a restarted reader: base + every delta
    assert fresh is not None and fresh.revision == 3 and fresh.model == model


async def test_a_new_base_ends_the_old_chain_and_expires_it(redis: Redis, node_pool: str) -> None:
    writer, reader = SnapshotWriter(redis, retain_s=60), SnapshotReader(redis)
    old = model_of(nodes=2, pods=4)
    stored = await writer.publish_base(node_pool, 1, old.entries(), taken_at=NOW)
    assert stored is not None
    assert await writer.publish_delta(node_pool, 2, Changes(), chain=stored[0], taken_at=NOW) is not None
    assert (await reader.read(node_pool)).revision == 2  # type: ignore[union-attr]
    other = SnapshotWriter(redis, retain_s=60)  # another writer (a restarted snapshotter) stores a base
    new = model_of(nodes=5, pods=1)
    assert await other.publish_base(node_pool, 2, new.entries(), taken_at=NOW) is None  # not ahead: refused
    replaced = await other.publish_base(node_pool, 3, new.entries(), taken_at=NOW)
    assert replaced is not None and replaced[0] != stored[0]
    assert await writer.publish_delta(node_pool, 3, Changes(), chain=stored[0], taken_at=NOW) is None
    current = await reader.read(node_pool)
    assert current is not None and current.revision == 3 and current.chain == replaced[0] and current.model == new
    assert await redis.ttl(redis_keys.snapshot_base(node_pool, 3)) == -1  # the latest base never expires
    for key in (redis_keys.snapshot_base(node_pool, 1), redis_keys.snapshot_base_part(node_pool, 1, 0),
                redis_keys.snapshot_delta(node_pool, 2)):
        assert 0 < await redis.ttl(key) <= 60, key


async def test_a_checkpoint_base_goes_on_with_the_chain_so_followers_never_read_it(
        redis: Redis, node_pool: str) -> None:
    """A base stored as a checkpoint of the chain comes with its revision's delta: a reader that follows reads
    that delta (no base), a fresh reader reads the checkpoint; a checkpoint that is not the chain's next
    revision is refused, and the delta stored with it expires (a leak otherwise: no later base expires it)."""
    writer, follower = SnapshotWriter(redis, retain_s=60), SnapshotReader(redis)
    model = model_of(nodes=2, pods=4)
    chain, _ = await writer.publish_base(node_pool, 1, model.entries(), taken_at=NOW)  # type: ignore[misc]
    assert (await follower.read(node_pool)).revision == 1  # type: ignore[union-attr]
    change = Changes(upserts=Entries(pods=(pod_entry(7, node_name="n1"),)))
    model.apply(change)
    assert await writer.publish_base(node_pool, 3, model.entries(), taken_at=NOW, follows=(chain, change)) is None
    stored = await writer.publish_base(node_pool, 2, model.entries(), taken_at=NOW, follows=(chain, change))
    assert stored is not None and stored[0] == chain
    current = await follower.read(node_pool)
    assert current is not None and current.revision == 2 and current.chain == chain and current.model == model
    assert (follower.bases_read, follower.deltas_read) == (1, 1)
    fresh = SnapshotReader(redis)
    again = await fresh.read(node_pool)
    assert again is not None and again.revision == 2 and again.model == model and fresh.deltas_read == 0
    assert 0 < await redis.ttl(redis_keys.snapshot_delta(node_pool, 2)) <= 60
    for key in (redis_keys.snapshot_base(node_pool, 1), redis_keys.snapshot_base_part(node_pool, 1, 0)):
        assert 0 < await redis.ttl(key) <= 60, key
    assert await redis.ttl(redis_keys.snapshot_base(node_pool, 2)) == -1
    after = Changes(removed=Removed(pods=("u7",)))
    model.apply(after)
    assert await writer.publish_delta(node_pool, 3, after, chain=chain, taken_at=NOW) is not None
    assert (await follower.read(node_pool)).model == model and follower.bases_read == 1  # type: ignore[union-attr]


async def test_a_follower_freezes_its_heap_again_after_many_deltas(redis: Redis, node_pool: str) -> None:
    """With checkpoints a follower may never read a base again: what its deltas brought is frozen after every
    `refreeze_deltas` of them, as a base is, so full collections do not rescan the model."""
    import gc

    writer, follower = SnapshotWriter(redis), SnapshotReader(redis, refreeze_deltas=3)
    chain, _ = await writer.publish_base(node_pool, 1, model_of(nodes=1, pods=1).entries(),  # type: ignore[misc]
                                         taken_at=NOW)
    await follower.read(node_pool)
    counts = []
    try:
        for revision in range(2, 8):
            gc.unfreeze()
            change = Changes(upserts=Entries(pods=(pod_entry(revision),)))
            assert await writer.publish_delta(node_pool, revision, change, chain=chain, taken_at=NOW)
            await follower.read(node_pool)
            counts.append(gc.get_freeze_count() > 0)
    finally:
        gc.unfreeze()
    assert counts == [False, False, True, False, False, True]  # after the 3rd and the 6th delta


async def test_readers_never_see_a_model_other_than_the_one_written_for_the_revision(
        redis: Redis, node_pool: str, stack: Any) -> None:
    writer = SnapshotWriter(redis, retain_s=0.2)  # superseded chains vanish almost at once
    model = model_of(nodes=4, pods=20)
    history: dict[int, ShardModel] = {}
    stop = asyncio.Event()
    mismatches: list[int] = []
    seen: list[list[int]] = []

    async def write() -> None:
        rng = random.Random(5)
        revision, chain = 0, ""
        for step in range(150):
            if step % 40 == 0:  # now and then a whole new base (as after a snapshotter restart)
                revision += 1
                history[revision] = ShardModel.of(model.entries())  # before a reader can see it
                stored = await writer.publish_base(node_pool, revision, model.entries(), taken_at=NOW)
                assert stored is not None
                chain = stored[0]
            else:
                i = rng.randrange(40)
                change = (Changes(upserts=Entries(pods=(pod_entry(i, node_name=f"n{rng.randrange(4)}"),)))
                          if rng.random() < 0.7 else Changes(removed=Removed(pods=(f"u{i}",))))
                model.apply(change)
                revision += 1
                history[revision] = ShardModel.of(model.entries())
                if step % 40 == 20:  # a checkpoint of the chain (its deltas got large), followed by its delta
                    assert await writer.publish_base(node_pool, revision, model.entries(), taken_at=NOW,
                                                     follows=(chain, change))
                else:
                    assert await writer.publish_delta(node_pool, revision, change, chain=chain, taken_at=NOW)
            await asyncio.sleep(0)

    async def read() -> None:
        other = connect_redis(RedisSettings(url=stack.redis_url))
        reader, mine = SnapshotReader(other), []
        seen.append(mine)
        try:
            while not stop.is_set():
                current = await reader.read(node_pool)
                if current is not None:
                    mine.append(current.revision)
                    if current.model != history[current.revision]:
                        mismatches.append(current.revision)
                await asyncio.sleep(0)
        finally:
            await other.aclose()

    readers = [asyncio.create_task(read()) for _ in range(2)]
    await write()
    stop.set()
    await asyncio.gather(*readers)
    assert not mismatches
    for mine in seen:
        assert mine and mine == sorted(mine)  # never backwards


async def test_latest_value_only_moves_forward(redis: Redis, node_pool: str) -> None:
    shares = LatestValue(redis, redis_keys.fair_share, Shares, ttl_s=60)
    assert await shares.get(node_pool) is None
    assert await shares.put(node_pool, 10, Shares({"team-a": 4000}))
    assert not await shares.put(node_pool, 9, Shares({"team-a": 1}))
    assert await shares.put(node_pool, 11, Shares({"team-a": 3000, "team-b": 1000}))
    assert await shares.get(node_pool) == Versioned(11, Shares({"team-a": 3000, "team-b": 1000}))
    assert 0 < await redis.ttl(redis_keys.fair_share(node_pool)) <= 60

    order = list(range(12, 60))
    random.Random(3).shuffle(order)
    results = await asyncio.gather(*(shares.put(node_pool, r, Shares({"r": r})) for r in order))
    assert results[order.index(59)] is True  # the newest always wins, whatever the arrival order
    assert (await shares.get(node_pool)) == Versioned(59, Shares({"r": 59}))


async def test_seen_ids_remember_handled_messages_until_they_expire(redis: Redis, node_pool: str) -> None:
    seen = SeenIds(redis, consumer=f"binder-{node_pool}", ttl_s=0.5)
    assert not await seen.contains("m1")
    await seen.mark("m1")
    assert await seen.contains("m1")
    assert await seen.mark_if_new("m2")
    assert not await seen.mark_if_new("m2")
    await asyncio.sleep(0.8)
    assert not await seen.contains("m1") and await seen.mark_if_new("m2")


async def test_a_snapshot_from_a_newer_schema_or_not_a_snapshot_is_refused_with_a_clear_error(
        redis: Redis, node_pool: str) -> None:
    from shoal.adapters.shard_snapshots import SnapshotUnreadable
    from shoal.messages.snapshot import SNAPSHOT_SCHEMA, SnapshotBase, SnapshotDelta

    writer = SnapshotWriter(redis)
    stored = await writer.publish_base(node_pool, 1, model_of(nodes=1, pods=2).entries(), taken_at=NOW)
    assert stored is not None
    chain, _ = stored
    # a delta written by a future snapshotter (its schema is newer than this reader's)
    future = SnapshotDelta(shard=node_pool, revision=2, chain=chain, taken_at=NOW, schema=SNAPSHOT_SCHEMA + 1)
    await redis.set(redis_keys.snapshot_delta(node_pool, 2), msgspec.msgpack.encode(future))
    await redis.set(redis_keys.snapshot_latest(node_pool), 2)
    with pytest.raises(SnapshotUnreadable, match=rf"delta 2 of shard .* is snapshot schema {SNAPSHOT_SCHEMA + 1}"):
        await SnapshotReader(redis).read(node_pool)
    # a base header that is not a snapshot at all
    await redis.set(redis_keys.snapshot_latest(node_pool), 1)
    await redis.set(redis_keys.snapshot_base(node_pool, 1), b"\x93not msgpack of a base")
    with pytest.raises(SnapshotUnreadable, match=r"base 1 of shard .* cannot be decoded"):
        await SnapshotReader(redis).read(node_pool)
    older = msgspec.msgpack.decode(msgspec.msgpack.encode(SnapshotBase(shard="s", revision=1, chain="c",
                                                                        taken_at=NOW, parts=0)))
    del older["schema"]  # what writers before the schema field stored
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(older), type=SnapshotBase).schema == 1


async def test_the_snapshotter_checkpoints_its_chain_and_starts_a_new_one_only_after_a_lost_delta(
        redis: Redis, node_pool: str) -> None:
    """Through the snapshotter's own publishing (real writer, real Redis): past `base_every` deltas it stores a
    checkpoint of its chain, which a following planner's reader never reads; a delta whose write failed
    makes the next base a new chain (its changes are in no delta), which every reader reads."""
    from types import SimpleNamespace

    from services.snapshotter.handlers import Snapshotter
    from services.snapshotter.translate import Shards
    from shoal.adapters.inflight import InFlight
    from shoal.errors import TransientError
    from shoal.metrics import Metrics

    class Bus:
        async def publish(self, topic: str, message: object, *, key: str) -> tuple[int, int]:
            return 0, 0

    labels = {"kai.scheduler/node-pool": node_pool}

    def pod(i: int) -> dict:
        return {"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"{node_pool}-u{i}",
                                            "labels": labels},
                "spec": {"schedulerName": "shoal-scheduler"}, "status": {"phase": "Pending"}}

    writer = SnapshotWriter(redis, retain_s=60)
    snap = Snapshotter(mirror=SimpleNamespace(objects={}), shards=Shards("shoal-scheduler", now=lambda: NOW),  # type: ignore[arg-type]
                       writer=writer, inflight=InFlight(redis), bus=Bus(), metrics=Metrics(), base_every=3)  # type: ignore[arg-type]
    snap.on_change({"kind": "Node", "metadata": {"name": f"{node_pool}-n", "labels": labels},
                    "status": {"allocatable": {"nvidia.com/gpu": "8"}}}, False)
    follower = SnapshotReader(redis)
    for i in range(8):
        snap.on_change(pod(i), False)
        await snap.publish(node_pool)
        current = await follower.read(node_pool)
        assert current is not None and len(current.model.pods) == i + 1
    assert await redis.get(redis_keys.snapshot_base_latest(node_pool)) != b"1"  # checkpoints were stored
    assert follower.bases_read == 1, "a following reader read a checkpoint"
    fresh = await SnapshotReader(redis).read(node_pool)
    assert fresh is not None and fresh.model == current.model and fresh.chain == current.chain

    publish_delta = writer.publish_delta

    async def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise TransientError("redis went away")

    writer.publish_delta = failing  # type: ignore[method-assign]
    snap.on_change(pod(8), False)
    with pytest.raises(TransientError):
        await snap.publish(node_pool)
    writer.publish_delta = publish_delta  # type: ignore[method-assign]
    snap.on_change(pod(9), False)
    await snap.publish(node_pool)
    after = await follower.read(node_pool)
    assert after is not None and after.chain != current.chain and follower.bases_read == 2
    assert len(after.model.pods) == 10  # pod 8's change, in no delta, came with the new chain's base

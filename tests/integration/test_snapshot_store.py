"""The Redis snapshot store against a real Redis: round trip, atomic monotonic publish, expiry of old revisions."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest_asyncio
from redis.asyncio import Redis

from shoal.adapters import redis_keys
from shoal.adapters.dedup import SeenIds
from shoal.adapters.redis_client import connect_redis, redis_ready
from shoal.adapters.snapshot_store import LatestValue, SnapshotStore, Versioned
from shoal.settings import RedisSettings


class Node(msgspec.Struct, frozen=True):
    name: str
    gpus: int


class Snap(msgspec.Struct, frozen=True):
    revision: int
    nodes: tuple[Node, ...]
    payload: bytes = b""


class Shares(msgspec.Struct, frozen=True):
    by_queue: dict[str, int]


@pytest_asyncio.fixture
async def redis(stack: Any) -> AsyncIterator[Redis]:
    client = connect_redis(RedisSettings(url=stack.redis_url))
    try:
        yield client
    finally:
        await client.aclose()


def snap(revision: int, size: int = 3) -> Snap:
    return Snap(revision, tuple(Node(f"n{i}", 8) for i in range(size)))


async def test_publish_and_read_back(redis: Redis, node_pool: str) -> None:
    assert await redis_ready(redis)
    store = SnapshotStore(redis, Snap)
    assert await store.latest(node_pool) is None
    assert await store.publish(node_pool, 1, snap(1))
    assert await store.publish(node_pool, 5, snap(5, size=2))
    assert await store.latest(node_pool) == Versioned(5, snap(5, size=2))
    assert await store.get(node_pool, 1) == snap(1)
    assert await store.get(node_pool, 3) is None
    assert not await store.publish(node_pool, 4, snap(4))  # older: ignored
    assert not await store.publish(node_pool, 5, snap(5))  # repeated: ignored
    assert await store.latest_revision(node_pool) == 5
    assert await store.get(node_pool, 4) is None
    assert await redis.get(redis_keys.snapshot_latest(node_pool)) == b"5"
    assert await redis.ttl(redis_keys.snapshot(node_pool, 5)) == -1  # the latest never expires
    assert 0 < await redis.ttl(redis_keys.snapshot(node_pool, 1)) <= 300


async def test_concurrent_publishers_never_move_latest_backwards_or_to_a_missing_blob(
        redis: Redis, node_pool: str, stack: Any) -> None:
    store = SnapshotStore(redis, Snap, retain_s=0.05)  # superseded blobs vanish almost at once
    revisions = list(range(1, 121))
    random.Random(7).shuffle(revisions)
    stop = asyncio.Event()
    observed: list[list[int]] = []

    async def publisher(mine: list[int]) -> int:
        wins = 0
        for revision in mine:
            wins += await store.publish(node_pool, revision, snap(revision, size=50))
            await asyncio.sleep(0)
        return wins

    async def reader() -> None:
        other = connect_redis(RedisSettings(url=stack.redis_url))
        reader_store = SnapshotStore(other, Snap)
        seen: list[int] = []
        observed.append(seen)
        try:
            while not stop.is_set():
                latest = await reader_store.latest(node_pool)
                if latest is not None:
                    assert latest.value.revision == latest.revision  # pointer and blob agree
                    seen.append(latest.revision)
                pointer = await other.get(redis_keys.snapshot_latest(node_pool))
                if pointer is not None:
                    # the pointer always names a blob that exists
                    assert await other.exists(redis_keys.snapshot(node_pool, int(pointer))) == 1
                await asyncio.sleep(0)
        finally:
            await other.aclose()

    readers = [asyncio.create_task(reader()) for _ in range(2)]
    wins = await asyncio.gather(*(publisher(revisions[i::4]) for i in range(4)))
    stop.set()
    await asyncio.gather(*readers)

    assert sum(wins) >= 1
    assert await store.latest_revision(node_pool) == 120
    assert (await store.latest(node_pool)) == Versioned(120, snap(120, size=50))
    for seen in observed:
        assert seen, "a reader saw no snapshot"
        assert seen == sorted(seen)  # never backwards


async def test_superseded_revisions_expire(redis: Redis, node_pool: str) -> None:
    store = SnapshotStore(redis, Snap, retain_s=0.5)
    for revision in (1, 2, 3):
        assert await store.publish(node_pool, revision, snap(revision))
    assert await store.get(node_pool, 2) == snap(2)
    await asyncio.sleep(1.0)
    assert await store.get(node_pool, 1) is None
    assert await store.get(node_pool, 2) is None
    assert await store.latest(node_pool) == Versioned(3, snap(3))
    assert await redis.keys(redis_keys.snapshot(node_pool, 1)[: -len(":1")] + ":*") == [
        redis_keys.snapshot(node_pool, 3).encode()]


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

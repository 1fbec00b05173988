"""Versioned per-shard snapshots and latest values in Redis (msgpack via msgspec).

Snapshots::

    store = SnapshotStore(redis, Snapshot, retain_s=settings.redis.snapshot_retain_s)
    if await store.publish("pool-a", 42, snapshot):       # False: revision 42 or newer already published
        await bus.publish(topics.SNAPSHOTS, SnapshotPublished(..., revision=42), key="pool-a")
    newest = await store.latest("pool-a")                 # Versioned(revision=42, value=Snapshot(...)) or None
    exact = await store.get("pool-a", 41)                 # None once a superseded revision expired

A publish writes the blob and moves the latest pointer in one MULTI/EXEC guarded by WATCH on the pointer, so
the pointer never goes backwards and never names a missing blob; the superseded blob gets a TTL of `retain_s`
so readers that just saw its revision can still fetch it.

Latest values (one per shard, revision never goes backwards; e.g. fair share)::

    shares = LatestValue(redis, redis_keys.fair_share, FairShares)
    await shares.put("pool-a", 42, fair_shares)          # False when a newer revision is stored
    current = await shares.get("pool-a")                  # Versioned(revision, value) or None
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import msgspec
from redis.asyncio import Redis
from redis.exceptions import WatchError

from shoal.adapters import redis_keys
from shoal.adapters.redis_client import redis_call
from shoal.errors import ConflictError, TransientError

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()


class Versioned(msgspec.Struct, Generic[T], frozen=True):
    revision: int
    value: T


class SnapshotStore(Generic[T]):
    """Per-shard snapshot revisions: newest one without expiry, superseded ones kept for `retain_s`."""

    def __init__(self, redis: Redis, snapshot_type: type[T], *, retain_s: float = 300.0,
                 max_cas_tries: int = 50) -> None:
        self._redis = redis
        self._decoder: msgspec.msgpack.Decoder[T] = msgspec.msgpack.Decoder(snapshot_type)
        self._retain_ms = max(1, int(retain_s * 1000))
        self._max_cas_tries = max_cas_tries

    async def publish(self, shard: str, revision: int, snapshot: T) -> bool:
        """Store `snapshot` as `revision` and make it the latest; False (nothing written) when the latest
        revision is already >= `revision` (a late or repeated publish)."""
        return await self.publish_encoded(shard, revision, _encoder.encode(snapshot))

    async def publish_encoded(self, shard: str, revision: int, blob: bytes) -> bool:
        if revision < 0:
            raise ValueError(f"revision must be >= 0, got {revision}")
        return bool(await redis_call("snapshot_publish", lambda: self._compare_and_set(shard, revision, blob)))

    async def _compare_and_set(self, shard: str, revision: int, blob: bytes) -> bool:
        latest_key = redis_keys.snapshot_latest(shard)
        for _ in range(self._max_cas_tries):
            async with self._redis.pipeline(transaction=True) as pipe:
                try:
                    await pipe.watch(latest_key)
                    raw = await pipe.get(latest_key)
                    current = int(raw) if raw is not None else None
                    if current is not None and current >= revision:
                        return False
                    pipe.multi()
                    pipe.set(redis_keys.snapshot(shard, revision), blob)
                    pipe.set(latest_key, str(revision).encode())
                    if current is not None:
                        pipe.pexpire(redis_keys.snapshot(shard, current), self._retain_ms)
                    await pipe.execute()
                    return True
                except WatchError:
                    continue  # another publisher moved the pointer: read it again
        raise ConflictError(f"snapshot publish for shard {shard!r} lost {self._max_cas_tries} races in a row")

    async def latest_revision(self, shard: str) -> int | None:
        raw = await redis_call("snapshot_latest_revision", lambda: self._redis.get(redis_keys.snapshot_latest(shard)))
        return int(raw) if raw is not None else None

    async def latest(self, shard: str) -> Versioned[T] | None:
        """The newest snapshot of `shard`, or None if none was ever published."""
        for _ in range(5):
            revision = await self.latest_revision(shard)
            if revision is None:
                return None
            blob = await self.get_encoded(shard, revision)
            if blob is not None:
                return Versioned(revision, self._decoder.decode(blob))
            # superseded and expired between the two reads: the pointer has moved on, read it again
        raise TransientError(f"latest snapshot of shard {shard!r} kept moving away while being read")

    async def get_encoded(self, shard: str, revision: int) -> bytes | None:
        return await redis_call("snapshot_get", lambda: self._redis.get(redis_keys.snapshot(shard, revision)))

    async def get(self, shard: str, revision: int) -> T | None:
        """That exact revision, or None if it never existed or has expired."""
        blob = await self.get_encoded(shard, revision)
        return self._decoder.decode(blob) if blob is not None else None


_PUT_IF_NEWER = """
local current = redis.call('HGET', KEYS[1], 'revision')
if current and tonumber(current) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'revision', ARGV[1], 'value', ARGV[2])
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 1
"""


class LatestValue(Generic[T]):
    """One msgpack value per shard with a revision that never goes backwards (atomic Lua compare-and-set)."""

    def __init__(self, redis: Redis, key: Callable[[str], str], value_type: type[T], *,
                 ttl_s: float | None = None) -> None:
        self._redis = redis
        self._key = key
        self._decoder: msgspec.msgpack.Decoder[T] = msgspec.msgpack.Decoder(value_type)
        self._ttl_ms = int(ttl_s * 1000) if ttl_s else 0
        self._put_if_newer = redis.register_script(_PUT_IF_NEWER)

    async def put(self, shard: str, revision: int, value: T) -> bool:
        """Store `value` at `revision`; False (nothing written) when the stored revision is >= `revision`."""
        blob = _encoder.encode(value)
        result = await redis_call("latest_value_put", lambda: self._put_if_newer(
            keys=[self._key(shard)], args=[revision, blob, self._ttl_ms]))
        return bool(result)

    async def get(self, shard: str) -> Versioned[T] | None:
        revision, blob = await redis_call("latest_value_get",
                                     lambda: self._redis.hmget(self._key(shard), ["revision", "value"]))
        if revision is None or blob is None:
            return None
        return Versioned(int(revision), self._decoder.decode(blob))

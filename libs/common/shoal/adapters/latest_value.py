"""Latest values in Redis, one per shard, whose revision never goes backwards (msgpack via msgspec; e.g. fair
share). Snapshots themselves: `shoal.adapters.shard_snapshots`.

    shares = LatestValue(redis, redis_keys.fair_share, FairShares)
    await shares.put("pool-a", 42, fair_shares)          # False when a newer revision is stored
    current = await shares.get("pool-a")                  # Versioned(revision, value) or None
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import msgspec
from redis.asyncio import Redis

from shoal.adapters.redis_client import redis_call

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()


class Versioned(msgspec.Struct, Generic[T], frozen=True):
    revision: int
    value: T


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

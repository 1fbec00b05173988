"""The pending verdicts a shard's planner published last, so each goes out on the decision stream once.

One Redis hash per shard (`redis_keys.verdicts`), one field per PodGroup ("ns/name"), the value a msgpack
`Verdict`. Written after the decisions are published (a crash in between publishes a verdict twice, never
loses one); read by whichever planner owns the shard, so a restart or a takeover does not re-publish them.
The rule deciding what is news is `services.planner.verdicts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec
from redis.asyncio import Redis

from shoal.adapters import redis_keys
from shoal.adapters.redis_client import redis_call


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """The verdict about one PodGroup as last published."""

    reason: str
    message: str
    published_s: float  # epoch seconds


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Verdict)


class PublishedVerdicts:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def all(self, shard: str) -> dict[str, Verdict]:
        raw = await redis_call("verdicts_all", lambda: self._redis.hgetall(redis_keys.verdicts(shard)))
        out = {}
        for field, value in raw.items():
            try:
                out[field.decode()] = _decoder.decode(value)
            except msgspec.DecodeError:
                continue  # unreadable (an older layout): treated as never published
        return out

    async def update(self, shard: str, store: Mapping[str, Verdict], drop: Iterable[str]) -> None:
        key, gone = redis_keys.verdicts(shard), [pg for pg in drop if pg not in store]
        if not store and not gone:
            return

        async def write() -> None:
            async with self._redis.pipeline(transaction=True) as pipe:
                if store:
                    pipe.hset(key, mapping={pg: _encoder.encode(v) for pg, v in store.items()})
                if gone:
                    pipe.hdel(key, *gone)
                await pipe.execute()

        await redis_call("verdicts_update", write)

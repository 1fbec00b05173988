"""The cluster as the snapshotter last stored it: every shard's typed model, read from Redis.

    view = ClusterView(redis)
    shards = await view.read()        # {shard: Current(revision, taken_at, model, …)}, by shard name

The shards are the `shoal:snapshot-latest:<shard>` keys; each is read with one `SnapshotReader`, which keeps
the model and applies only the deltas since its last read, so reading again is cheap. Reads are serialised
(one lock): the dashboard's requests and the history sampler share the readers. A shard that cannot be read
(a base expired mid-read, a value that does not decode) is left out of that answer and logged, never raised.
"""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from shoal.adapters import redis_keys
from shoal.adapters.redis_client import redis_call
from shoal.adapters.shard_snapshots import Current, SnapshotReader, SnapshotUnreadable
from shoal.errors import TransientError
from shoal.logging import get_logger

log = get_logger("services.api")


class ClusterView:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._reader = SnapshotReader(redis)
        self._lock = asyncio.Lock()
        self._prefix = redis_keys.snapshot_latest("x")[:-1]

    async def shards(self) -> list[str]:
        async def scan() -> list[str]:
            return sorted({key.decode()[len(self._prefix):]
                           async for key in self._redis.scan_iter(match=self._prefix + "*", count=1000)})

        return await redis_call("snapshot_shards", scan)

    async def read(self, shard: str | None = None) -> dict[str, Current]:
        """The newest model of every shard (or only `shard`), by shard name."""
        async with self._lock:
            names = [shard] if shard else await self.shards()
            out: dict[str, Current] = {}
            for name in names:
                try:
                    current = await self._reader.read(name)
                except (TransientError, SnapshotUnreadable) as exc:  # the reader wraps every decode error
                    log.warning("snapshot_read_failed", shard=name, error=str(exc))
                    self._reader.current.pop(name, None)
                    continue
                if current is not None:
                    out[name] = current
            for gone in set(self._reader.current) - set(names) if not shard else ():
                self._reader.current.pop(gone, None)
            return out

"""Decisions in flight: binds the planner sent that the cluster does not show yet.

One Redis hash per shard (`redis_keys.inflight`), one field per pod uid, the value a msgpack
`InFlightBind`. The planner adds entries BEFORE it publishes a plan; the binder applies a bind only
while its entry still names the same plan (the entry is the bind's lease) and removes it when the
bind fails; the snapshotter removes entries the cluster shows done (pod bound or gone) or expired.
Planners read the hash before the snapshot, so an entry removed by the snapshotter is always visible
as a bound pod in the snapshot read next: nothing is double-booked, across restarts too.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import msgspec
from redis.asyncio import Redis

from shoal.adapters import redis_keys
from shoal.adapters.redis_client import redis_call
from shoal.messages.snapshot import InFlightBind

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(InFlightBind)
# a lease is renewed only where Redis still holds exactly what the binder read: one removed (bind failed, pod seen
# bound), replaced by a later plan's or renewed by another binder stays as it is
_RENEW = """
local renewed = {}
for i = 1, #ARGV, 3 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
    renewed[#renewed + 1] = ARGV[i]
  end
end
return renewed
"""
# Planners stop counting a lease once it expired and may give its resources to another pod: a bind is
# applied only while its lease has at least this long to run, so it lands before the lease stops counting.
LEASE_GUARD_S = 5.0


def live(entry: InFlightBind | None, now_s: float | None = None) -> InFlightBind | None:
    """The lease while it has at least LEASE_GUARD_S to run, else None."""
    now = time.time() if now_s is None else now_s
    return entry if entry is not None and entry.expires_at > now + LEASE_GUARD_S else None


class InFlight:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._renew = redis.register_script(_RENEW)
        self._decoded: dict[str, dict[bytes, InFlightBind]] = {}  # shard → stored value → its entry (frozen)

    async def add(self, shard: str, entries: Iterable[InFlightBind]) -> None:
        mapping = {e.pod_uid or e.pod: _encoder.encode(e) for e in entries}
        if mapping:
            await redis_call("inflight_add", lambda: self._redis.hset(redis_keys.inflight(shard), mapping=mapping))

    async def all(self, shard: str) -> list[InFlightBind]:
        raw = await redis_call("inflight_all", lambda: self._redis.hgetall(redis_keys.inflight(shard)))
        # the snapshotter and planners read the whole hash every cycle while most entries stay as they were:
        # an unchanged value is decoded once; the cache keeps only what the hash held at the last read
        known, fresh = self._decoded.get(shard, {}), {}
        for value in raw.values():
            entry = known.get(value)
            fresh[value] = entry if entry is not None else _decoder.decode(value)
        self._decoded[shard] = fresh
        return sorted(fresh.values(), key=lambda e: e.pod)

    async def get(self, shard: str, pod_uid: str, *, now_s: float | None = None) -> InFlightBind | None:
        """The pod's lease, or None when it has none or the lease ends within LEASE_GUARD_S (a plan held up,
        e.g. by a Kafka outage, must not bind what later plans may have booked for others)."""
        raw = await redis_call("inflight_get", lambda: self._redis.hget(redis_keys.inflight(shard), pod_uid))
        return live(_decoder.decode(raw) if raw is not None else None, now_s)

    async def get_many(self, shard: str, pod_uids: Iterable[str]) -> dict[str, InFlightBind]:
        """The leases of these pods as stored, in one read; check each with `live` when it is used."""
        fields = list(pod_uids)
        if not fields:
            return {}
        values = await redis_call("inflight_get_many", lambda: self._redis.hmget(redis_keys.inflight(shard), fields))
        return {uid: _decoder.decode(raw) for uid, raw in zip(fields, values, strict=True) if raw is not None}

    async def renew(self, shard: str, leases: Iterable[InFlightBind], *, now_s: float | None = None
                    ) -> list[InFlightBind]:
        """Each lease again for its `ttl_s` from now, where it is still live and Redis still holds it as given
        (atomically); returns the leases as renewed. A lease without `ttl_s` is left as it is."""
        now = time.time() if now_s is None else now_s
        given = {e.pod_uid or e.pod: e for e in leases if e.ttl_s > 0 and live(e, now) is not None}
        if not given:
            return []
        fresh = {uid: msgspec.structs.replace(e, expires_at=now + e.ttl_s) for uid, e in given.items()}
        args: list[str | bytes] = []
        for uid, entry in given.items():
            args += [uid, _encoder.encode(entry), _encoder.encode(fresh[uid])]
        renewed = await redis_call("inflight_renew", lambda: self._renew(keys=[redis_keys.inflight(shard)], args=args))
        return [fresh[uid.decode() if isinstance(uid, bytes) else uid] for uid in renewed]

    async def remove(self, shard: str, pod_uids: Iterable[str]) -> int:
        fields = list(pod_uids)
        if not fields:
            return 0
        return int(await redis_call("inflight_remove", lambda: self._redis.hdel(redis_keys.inflight(shard), *fields)))

    async def groups_in_flight(self) -> set[str]:
        """The shared-GPU groups of every shard's in-flight binds (their reservation pods must stay)."""

        async def scan() -> set[str]:
            groups: set[str] = set()
            async for key in self._redis.scan_iter(match=redis_keys.inflight_pattern(), count=100):
                for raw in (await self._redis.hgetall(key)).values():
                    groups.update(_decoder.decode(raw).gpu_groups)
            return groups

        return await redis_call("inflight_groups", scan)

"""Shoal's own allocation history in Redis, for time-based fair share without Prometheus (SPEC §2.7).

Writing (the fairshare service, once per snapshot)::

    history = UsageHistory(redis)
    await history.record("pool-a", Sample(at_s=taken_at, capacity=Amounts(gpu=16_000), allocated={...}), params)

Reading (the planner and the fairshare service; recomputed at most every `refresh_s` per shard)::

    usage = await history.usage("pool-a", now_s=taken_at)     # {"team-a": {"gpu": 0.42, "cpu": 0.1, ...}}

Layout (keys in shoal.adapters.redis_keys): `usage-meta:<shard>` {params, last}, `usage-index:<shard>` (sorted
set of bucket starts) and one hash per bucket `usage-bucket:<shard>:<start>` of amount·seconds integrals. One
Lua script adds a sample atomically: the seconds it covers are measured from the stored `last` sample time, so a
repeated or reordered snapshot (Kafka redelivery, two owners during a rebalance) adds nothing. Buckets expire
after the window and the index is trimmed, so the history stays bounded. The maths is in `shoal.core.usage`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Annotated, Literal, Protocol

import msgspec
from redis.asyncio import Redis

from shoal.adapters import redis_keys
from shoal.adapters.redis_client import redis_call
from shoal.core.usage import (
    Bucket,
    Sample,
    UsageParams,
    bucket_from_fields,
    bucket_start,
    normalised_usage,
    rates,
    trim_before,
)
from shoal.settings import PositiveFloat, PositiveInt, Section, doc

_RECORD = """
local at = tonumber(ARGV[1])
local ttl = tonumber(ARGV[5])
redis.call('HSET', KEYS[1], 'params', ARGV[3])
redis.call('EXPIRE', KEYS[1], ttl)
local last = redis.call('HGET', KEYS[1], 'last')
if last and tonumber(last) >= at then return '0' end
redis.call('HSET', KEYS[1], 'last', ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[6])
if not last then return '0' end
local dt = math.min(at - tonumber(last), tonumber(ARGV[2]))
for i = 7, #ARGV, 2 do
  redis.call('HINCRBYFLOAT', KEYS[3], ARGV[i], tonumber(ARGV[i + 1]) * dt)
end
redis.call('HINCRBYFLOAT', KEYS[3], 'seconds', dt)
redis.call('EXPIRE', KEYS[3], ttl)
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[4])
redis.call('EXPIRE', KEYS[2], ttl)
return tostring(dt)
"""

_json = msgspec.json.Encoder()
_params = msgspec.json.Decoder(UsageParams)


@dataclass
class _Cached:
    at: float
    usage: dict[str, dict[str, float]]


@dataclass
class UsageHistory:
    redis: Redis
    refresh_s: float = 10.0
    _cache: dict[str, _Cached] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._record = self.redis.register_script(_RECORD)

    async def record(self, shard: str, sample: Sample, params: UsageParams) -> float:
        """Add one sample; returns the seconds it accounted for (0 for the first, a repeated or an old one)."""
        start = bucket_start(sample.at_s, params)
        ttl = int(params.window_s + 2 * params.bucket_s)
        args: list[str | float | int] = [repr(float(sample.at_s)), params.gap_s, _json.encode(params).decode(),
                                         start, ttl, trim_before(params, sample.at_s)]
        for name, rate in rates(sample).items():
            args += [name, repr(float(rate))]
        keys = [redis_keys.usage_meta(shard), redis_keys.usage_index(shard), redis_keys.usage_bucket(shard, start)]
        result = await redis_call("usage_record", lambda: self._record(keys=keys, args=args))
        return float(result)

    async def params(self, shard: str) -> UsageParams | None:
        raw = await redis_call("usage_params", lambda: self.redis.hget(redis_keys.usage_meta(shard), "params"))
        return _params.decode(raw) if raw else None

    async def buckets(self, shard: str, now_s: float | None = None) -> tuple[UsageParams | None, list[Bucket]]:
        """The recorded parameters and the buckets still held (those that can be in a window at `now_s`)."""
        params = await self.params(shard)
        if params is None:
            return None, []
        low = trim_before(params, now_s if now_s is not None else time.time())
        starts = await redis_call("usage_index", lambda: self.redis.zrangebyscore(
            redis_keys.usage_index(shard), low, "+inf"))

        async def read_all() -> list:
            async with self.redis.pipeline(transaction=False) as pipe:
                for raw in starts:
                    pipe.hgetall(redis_keys.usage_bucket(shard, int(float(raw))))
                return await pipe.execute()

        rows = await redis_call("usage_buckets", read_all) if starts else []
        out = []
        for raw, fields in zip(starts, rows, strict=True):
            if fields:
                out.append(bucket_from_fields(int(float(raw)),
                                              {k.decode(): float(v) for k, v in fields.items()}))
        return params, out

    async def usage(self, shard: str, *, now_s: float, fresh: bool = False) -> dict[str, dict[str, float]]:
        """Normalised usage per queue and resource (0..1) at `now_s`; cached for `refresh_s` of wall time."""
        cached = self._cache.get(shard)
        if not fresh and cached is not None and time.monotonic() - cached.at < self.refresh_s:
            return cached.usage
        params, buckets = await self.buckets(shard, now_s)
        usage = normalised_usage(buckets, params, now_s) if params is not None else {}
        self._cache[shard] = _Cached(time.monotonic(), usage)
        return usage

    async def clear(self, shard: str) -> None:
        """Forget a shard's history (tests, operators resetting fairness)."""
        starts = await redis_call("usage_index", lambda: self.redis.zrange(redis_keys.usage_index(shard), 0, -1))
        keys = [redis_keys.usage_meta(shard), redis_keys.usage_index(shard)]
        keys += [redis_keys.usage_bucket(shard, int(float(s))) for s in starts]
        await redis_call("usage_clear", lambda: self.redis.delete(*keys))
        self._cache.pop(shard, None)


class UsageSource(Protocol):
    async def usage(self, shard: str, *, now_s: float, fresh: bool = False) -> dict[str, dict[str, float]]: ...


class UsageSettings(Section, frozen=True, kw_only=True):
    """Time-based fair share: where usage comes from, how its history is kept and weighed.
    With the Redis source the parameters the fairshare service recorded are used by every reader."""

    enabled: Annotated[bool, doc("weigh queues' over-quota shares by their past usage")] = True
    source: Annotated[Literal["redis", "prometheus"], doc("Shoal's own history in Redis, or Prometheus")] = "redis"
    bucket_s: Annotated[PositiveInt, doc("history bucket length")] = 300
    window_s: Annotated[PositiveInt, doc("usage window (604800: a week, KAI's default)")] = 7 * 24 * 3600
    half_life_s: Annotated[int, doc("usage this old counts half (0: no decay)")] = 0
    window_type: Annotated[Literal["sliding", "tumbling"], doc("the last window, or windows from the tumbling "
                                                               "start")] = "sliding"
    tumbling_start_s: Annotated[int, doc("epoch seconds where tumbling windows are anchored")] = 0
    refresh_s: Annotated[PositiveFloat, doc("how often the usage is re-read")] = 10.0
    prometheus_url: Annotated[str, doc("Prometheus base URL (source prometheus)")] = ""
    # defaults: shoal.adapters.prometheus_usage.ALLOCATION_QUERY and CAPACITY_QUERY
    prometheus_allocation_query: Annotated[str, doc("PromQL of allocation (empty: Shoal's query)")] = ""
    prometheus_capacity_query: Annotated[str, doc("PromQL of capacity (empty: Shoal's query)")] = ""
    prometheus_timeout_s: Annotated[PositiveFloat, doc("how long a Prometheus query may take")] = 10.0

    def params(self) -> UsageParams:
        return UsageParams(bucket_s=self.bucket_s, window_s=self.window_s, half_life_s=self.half_life_s,
                           window_type=self.window_type, tumbling_start_s=self.tumbling_start_s)

    def problems(self) -> list[str]:
        found = [f"SHOAL_USAGE_{p.split(':')[0].upper()}:{p.split(':', 1)[1]}" for p in self.params().problems()]
        if self.source == "prometheus" and not self.prometheus_url.startswith(("http://", "https://")):
            found.append("SHOAL_USAGE_PROMETHEUS_URL: an http(s) URL is required when the source is prometheus")
        return found


def usage_source(redis: Redis, settings: UsageSettings) -> UsageSource | None:
    """The configured source of usage (None when time-based fair share is off)."""
    if not settings.enabled:
        return None
    if settings.source == "prometheus":
        from shoal.adapters import prometheus_usage as prom

        return prom.PrometheusUsage(settings.prometheus_url, settings.params(),
                                    allocation_query=settings.prometheus_allocation_query or prom.ALLOCATION_QUERY,
                                    capacity_query=settings.prometheus_capacity_query or prom.CAPACITY_QUERY,
                                    timeout_s=settings.prometheus_timeout_s, refresh_s=settings.refresh_s)
    return UsageHistory(redis, refresh_s=settings.refresh_s)

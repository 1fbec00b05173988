"""What every scheduling service opens first: Shoal's topics, a Redis client and an idempotent publisher,
with their readiness checks, closed again in reverse order.

    async with bus_and_redis(settings, readiness) as (redis, bus):
        ...
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from redis.asyncio import Redis

from shoal.adapters.http import Readiness
from shoal.adapters.kafka import Publisher, ensure_topics
from shoal.adapters.redis_client import connect_redis, redis_ready
from shoal.messages import topics
from shoal.settings import ServiceSettings


@contextlib.asynccontextmanager
async def bus_and_redis(settings: ServiceSettings, readiness: Readiness) -> AsyncIterator[tuple[Redis, Publisher]]:
    await ensure_topics(settings.kafka, [t.full(settings.topic_prefix) for t in topics.ALL],
                        partitions=topics.SNAPSHOTS.partitions)
    redis = connect_redis(settings.redis)
    readiness.add("redis", lambda: redis_ready(redis))
    try:
        async with Publisher(settings.kafka) as bus:
            readiness.add("kafka", bus.ready)
            yield redis, bus
    finally:
        await redis.aclose()

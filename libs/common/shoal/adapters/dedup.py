"""Remembering which message ids a consumer group has already handled (Kafka delivers at least once).

Usage (in a handler)::

    seen = SeenIds(redis, consumer="binder", ttl_s=3600)

    async def on_plan(plan: PlanIssued, delivery: Delivery) -> None:
        if await seen.contains(plan.meta.id):
            return                                 # a redelivery of work already done
        await apply(plan)                          # must itself be idempotent: a crash may come before mark()
        await seen.mark(plan.meta.id)

Marks expire after `ttl_s`; keys are `shoal:seen:<consumer>:<id>`.
"""

from __future__ import annotations

from redis.asyncio import Redis

from shoal.adapters import redis_keys
from shoal.adapters.redis_client import redis_call


class SeenIds:
    def __init__(self, redis: Redis, *, consumer: str, ttl_s: float = 3600.0) -> None:
        self._redis = redis
        self._consumer = consumer
        self._ttl_ms = max(1, int(ttl_s * 1000))

    async def contains(self, message_id: str) -> bool:
        key = redis_keys.seen(self._consumer, message_id)
        return bool(await redis_call("seen_contains", lambda: self._redis.exists(key)))

    async def mark(self, message_id: str) -> None:
        key = redis_keys.seen(self._consumer, message_id)
        await redis_call("seen_mark", lambda: self._redis.set(key, b"1", px=self._ttl_ms))

    async def mark_if_new(self, message_id: str) -> bool:
        """Atomically mark; True if this call was the first (for work that is safe to lose on a crash)."""
        key = redis_keys.seen(self._consumer, message_id)
        return bool(await redis_call("seen_mark_if_new",
                                     lambda: self._redis.set(key, b"1", px=self._ttl_ms, nx=True)))

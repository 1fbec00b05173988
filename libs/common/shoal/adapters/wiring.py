"""What every scheduling service opens first: Shoal's topics, a Redis client and an idempotent publisher,
with their readiness checks, closed again in reverse order; and the whole application of a service that
consumes one topic (the fairshare service, the planner, the binder).

    async with bus_and_redis(settings, readiness) as (redis, bus):
        ...

    def build(settings: PlannerSettings) -> web.Application:
        return consumer_app("planner", settings, topics.SNAPSHOTS, SnapshotPublished,
                            lambda ports: Planner(..., bus=ports.bus, metrics=ports.metrics).on_snapshot,
                            group_id=settings.group_id)
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from redis.asyncio import Redis

from shoal.adapters.http import Readiness, background, build_app
from shoal.adapters.kafka import Consumer, Delivery, Publisher, ensure_topics
from shoal.adapters.redis_client import connect_redis, redis_ready
from shoal.messages import topics
from shoal.metrics import Metrics
from shoal.settings import ServiceSettings

CONSUMER = web.AppKey("consumer", Consumer)
Handler = Callable[[Any, Delivery], Awaitable[Any]]


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


@dataclass(frozen=True)
class Ports:
    """What a consuming service's handler is made from: the app (for what `contexts` opened before), Redis,
    the publisher and the service's metrics."""

    app: web.Application
    redis: Redis
    bus: Publisher
    metrics: Metrics


def consumer_app(name: str, settings: ServiceSettings, topic: topics.Topic, message_type: Any,
                 handler: Callable[[Ports], Handler], *, group_id: str, pipeline: int = 1,
                 contexts: Sequence[Callable[[web.Application], AsyncIterator[None]]] = ()) -> web.Application:
    """A service that consumes `topic` in consumer group `group_id` (both after the service's topic prefix): health and metrics
    over HTTP, `contexts` set up first (e.g. a Kubernetes client) and closed last, then Redis and the publisher,
    then the consumer, ready once every one of them is; its loop runs in the background as `name`. The caller
    adds its own background tasks to the returned app."""
    metrics, readiness = Metrics(), Readiness()
    app = build_app(metrics=metrics, readiness=readiness)
    prefix = settings.topic_prefix

    async def wiring(app: web.Application) -> AsyncIterator[None]:
        async with bus_and_redis(settings, readiness) as (redis, bus):
            consumer = Consumer(settings.kafka, [topic.full(prefix)], group_id=prefix + group_id,
                                message_type=message_type, handler=handler(Ports(app, redis, bus, metrics)),
                                pipeline=pipeline, metrics=metrics)
            app[CONSUMER] = consumer
            async with consumer:
                readiness.add("consumer", consumer.ready)
                yield

    app.cleanup_ctx.extend(contexts)
    app.cleanup_ctx.append(wiring)
    app.cleanup_ctx.append(background(name, lambda app: app[CONSUMER].run()))
    return app

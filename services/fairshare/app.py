"""Wiring of the fairshare service: snapshot announcements in, fair-share figures to Redis and Kafka."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from services.fairshare.config import FairShareSettings
from services.fairshare.handlers import FairShare
from shoal.adapters import redis_keys
from shoal.adapters.http import Readiness, background, build_app
from shoal.adapters.kafka import Consumer
from shoal.adapters.latest_value import LatestValue
from shoal.adapters.shard_snapshots import SnapshotReader
from shoal.adapters.usage_history import UsageHistory, usage_source
from shoal.adapters.wiring import bus_and_redis
from shoal.messages import topics
from shoal.messages.plan import FairShareComputed
from shoal.messages.snapshot import SnapshotPublished
from shoal.metrics import Metrics

CONSUMER = web.AppKey("consumer", Consumer)


def build(settings: FairShareSettings) -> web.Application:
    metrics, readiness = Metrics(), Readiness()
    app = build_app(metrics=metrics, readiness=readiness)
    prefix = settings.topic_prefix

    async def wiring(app: web.Application) -> AsyncIterator[None]:
        async with bus_and_redis(settings, readiness) as (redis, bus):
            service = FairShare(snapshots=SnapshotReader(redis),
                                results=LatestValue(redis, redis_keys.fair_share, FairShareComputed),
                                bus=bus, metrics=metrics, topic_prefix=prefix,
                                history=UsageHistory(redis, refresh_s=settings.usage.refresh_s)
                                if settings.usage.enabled else None,
                                usage_params=settings.usage.params(), min_interval_s=settings.min_interval_s,
                                usage_source=usage_source(redis, settings.usage)
                                if settings.usage.source != "redis" else None)
            consumer = Consumer(settings.kafka, [topics.SNAPSHOTS.full(prefix)], group_id=prefix + settings.group_id,
                                message_type=SnapshotPublished, handler=service.on_snapshot, metrics=metrics)
            app[CONSUMER] = consumer
            async with consumer:
                readiness.add("consumer", consumer.ready)
                yield

    app.cleanup_ctx.append(wiring)
    app.cleanup_ctx.append(background("fairshare", lambda app: app[CONSUMER].run()))
    return app

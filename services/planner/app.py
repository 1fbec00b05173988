"""Wiring of the planner: Kafka consumer on snapshot announcements, Redis stores, publisher, HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from services.planner.config import PlannerSettings
from services.planner.handlers import Planner, load_config_doc
from shoal.adapters import redis_keys
from shoal.adapters.http import Readiness, background, build_app
from shoal.adapters.inflight import InFlight
from shoal.adapters.kafka import Consumer
from shoal.adapters.latest_value import LatestValue
from shoal.adapters.shard_snapshots import SnapshotReader
from shoal.adapters.usage_history import usage_source
from shoal.adapters.verdicts import PublishedVerdicts
from shoal.adapters.wiring import bus_and_redis
from shoal.messages import topics
from shoal.messages.plan import FairShareComputed
from shoal.messages.snapshot import SnapshotPublished
from shoal.metrics import Metrics

CONSUMER = web.AppKey("consumer", Consumer)


def build(settings: PlannerSettings) -> web.Application:
    metrics, readiness = Metrics(), Readiness()
    app = build_app(metrics=metrics, readiness=readiness)
    prefix = settings.topic_prefix

    async def wiring(app: web.Application) -> AsyncIterator[None]:
        async with bus_and_redis(settings, readiness) as (redis, bus):
            planner = Planner(
                shard_filter=frozenset(settings.shards),
                snapshots=SnapshotReader(redis),
                fair_shares=LatestValue(redis, redis_keys.fair_share, FairShareComputed),
                inflight=InFlight(redis), bus=bus, metrics=metrics, topic_prefix=prefix,
                inflight_ttl_s=settings.inflight_ttl_s,
                fairshare_stale_revisions=settings.fairshare_stale_revisions,
                config_doc=load_config_doc(settings.scheduler_config), history=usage_source(redis, settings.usage),
                sharing_mode_of=settings.mode_for,
                verdicts=PublishedVerdicts(redis), verdict_reassert_s=settings.verdict_reassert_s)
            consumer = Consumer(settings.kafka, [topics.SNAPSHOTS.full(prefix)], group_id=prefix + settings.group_id,
                                message_type=SnapshotPublished, handler=planner.on_snapshot, metrics=metrics)
            app[CONSUMER] = consumer
            async with consumer:
                readiness.add("consumer", consumer.ready)
                yield

    app.cleanup_ctx.append(wiring)
    app.cleanup_ctx.append(background("planner", lambda app: app[CONSUMER].run()))
    return app

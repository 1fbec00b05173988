"""Wiring of the fairshare service: snapshot announcements in, fair-share figures to Redis and Kafka."""

from __future__ import annotations

import msgspec
from aiohttp import web

from services.fairshare.config import FairShareSettings
from services.fairshare.handlers import FairShare
from shoal.adapters import redis_keys
from shoal.adapters.latest_value import LatestValue
from shoal.adapters.planning import shard_inputs
from shoal.adapters.shard_snapshots import SnapshotReader
from shoal.adapters.usage_history import UsageHistory, usage_source
from shoal.adapters.wiring import Handler, Ports, consumer_app
from shoal.messages import topics
from shoal.messages.plan import FairShareComputed
from shoal.messages.snapshot import SnapshotPublished


def build(settings: FairShareSettings) -> web.Application:
    def fairshare(ports: Ports) -> Handler:
        redis = ports.redis
        history = UsageHistory(redis, refresh_s=settings.usage.refresh_s) if settings.usage.enabled else None
        # usage is read where the planner reads it; from the Redis history, through the recorder's own reader
        source = history if settings.usage.source == "redis" else usage_source(redis, settings.usage)
        return FairShare(snapshots=SnapshotReader(redis),
                         results=LatestValue(redis, redis_keys.fair_share, FairShareComputed),
                         bus=ports.bus, metrics=ports.metrics, topic_prefix=settings.topic_prefix,
                         history=history, usage_params=settings.usage.params(),
                         min_interval_s=settings.min_interval_s,
                         inputs=shard_inputs(settings, source)).on_snapshot

    consuming = msgspec.structs.replace(settings, kafka=settings.consumer_kafka())
    return consumer_app("fairshare", consuming, topics.SNAPSHOTS, SnapshotPublished, fairshare,
                        group_id=settings.group_id)

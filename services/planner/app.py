"""Wiring of the planner: Kafka consumer on snapshot announcements, Redis stores, publisher, HTTP."""

from __future__ import annotations

from aiohttp import web

from services.planner.config import PlannerSettings
from services.planner.handlers import Planner
from shoal.adapters import redis_keys
from shoal.adapters.inflight import InFlight
from shoal.adapters.latest_value import LatestValue
from shoal.adapters.planning import shard_inputs
from shoal.adapters.shard_snapshots import SnapshotReader
from shoal.adapters.usage_history import usage_source
from shoal.adapters.verdicts import PublishedVerdicts
from shoal.adapters.wiring import Handler, Ports, consumer_app
from shoal.messages import topics
from shoal.messages.plan import FairShareComputed
from shoal.messages.snapshot import SnapshotPublished


def build(settings: PlannerSettings) -> web.Application:
    def planner(ports: Ports) -> Handler:
        redis = ports.redis
        return Planner(
            shard_filter=frozenset(settings.shards),
            snapshots=SnapshotReader(redis),
            fair_shares=LatestValue(redis, redis_keys.fair_share, FairShareComputed),
            inflight=InFlight(redis), bus=ports.bus, metrics=ports.metrics, topic_prefix=settings.topic_prefix,
            inflight_ttl_s=settings.inflight_ttl_s, idle_cycle_s=settings.idle_cycle_s,
            bind_cap=settings.bind_cap,
            fairshare_stale_revisions=settings.fairshare_stale_revisions, fairshare_stale_s=settings.fairshare_stale_s,
            inputs=shard_inputs(settings, usage_source(redis, settings.usage)),
            verdicts=PublishedVerdicts(redis), verdict_reassert_s=settings.verdict_reassert_s).on_snapshot

    return consumer_app("planner", settings, topics.SNAPSHOTS, SnapshotPublished, planner, group_id=settings.group_id)

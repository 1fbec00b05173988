"""Wiring of the api service: the decision stream tailed into an index and a fan-out, Redis, the apiserver, HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from services.api import dashboard
from services.api.access import Access
from services.api.config import ApiSettings
from services.api.decisions import DecisionIndex, Event, Hub, tail
from services.api.handlers import Api
from services.api.history import History
from services.api.views import Views
from services.api.workloads import Evictions
from shoal.adapters import kube as k
from shoal.adapters.http import Readiness, background, build_app
from shoal.adapters.kafka import ensure_topics
from shoal.adapters.redis_client import connect_redis, redis_ready
from shoal.logging import get_logger
from shoal.messages import topics
from shoal.metrics import Metrics

log = get_logger("services.api")

API = web.AppKey("api", Api)
TAIL_READY = web.AppKey("tail_ready", asyncio.Event)


def build(settings: ApiSettings) -> web.Application:
    metrics, readiness = Metrics(), Readiness()
    app = build_app(metrics=metrics, readiness=readiness)
    access = Access(enabled=settings.api_auth == "kubernetes", ttl_s=settings.auth_cache_ttl_s,
                    size=settings.auth_cache_size)
    app.middlewares.append(access.middleware)
    topic = topics.DECISIONS.full(settings.topic_prefix)
    dropped = metrics.counter("api_sse_dropped_total", "Decisions dropped for SSE clients too slow to keep up.")
    api = Api(index=DecisionIndex(per_subject=settings.index_per_subject, subjects=settings.index_subjects,
                                  recent=settings.recent),
              hub=Hub(settings.sse_queue, on_drop=dropped.inc), kafka=settings.kafka, topic=topic,
              metrics=metrics, heartbeat_s=settings.heartbeat_s, access=access)
    views = Views(index=api.index, reservation_namespace=settings.reservation_namespace,
                  history=History(size=settings.history_size, interval_s=settings.history_interval_s,
                                  max_queues=settings.history_queues),
                  evictions=Evictions(settings.evictions), access=access)
    app[API] = api
    app[TAIL_READY] = asyncio.Event()
    api.routes(app)
    views.routes(app)
    dashboard.routes(app)

    def on_event(event: Event) -> None:
        api.count(event)
        views.on_decision(event)

    async def wiring(app: web.Application) -> AsyncIterator[None]:
        await ensure_topics(settings.kafka, [t.full(settings.topic_prefix) for t in topics.ALL],
                            partitions=topics.SNAPSHOTS.partitions)
        redis = connect_redis(settings.redis)
        kube_api = await k.connect_kube(settings.kube, component="api")
        api.redis, api.kube = redis, k.Kube(kube_api, request_timeout_s=settings.kube.request_timeout_s)
        if access.enabled:
            access.kube = api.kube
            await access.check_reviewer()
        else:
            log.warning("api_auth_off", message="SHOAL_API_AUTH=none: every caller reads every namespace "
                        "(local development only; docs/security.md)")
        views.connect(redis)
        readiness.add("redis", lambda: redis_ready(redis))
        readiness.add("decisions", app[TAIL_READY].is_set)
        try:
            yield
        finally:
            await kube_api.close()
            await redis.aclose()

    async def follow(app: web.Application) -> None:
        await tail(settings.kafka, topic, index=api.index, hub=api.hub, backlog=settings.backlog,
                   on_event=on_event, ready=app[TAIL_READY])

    app.cleanup_ctx.append(wiring)
    app.cleanup_ctx.append(background("decisions", follow))
    app.cleanup_ctx.append(background("history", views.sample_forever))
    app.on_shutdown.append(api.close)  # open event streams end, so shutdown does not wait for them
    return app

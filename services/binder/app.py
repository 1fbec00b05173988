"""Wiring of the binder: plan consumer, Kubernetes client, Redis (in-flight leases, de-duplication), HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from services.binder.config import BinderSettings
from services.binder.handlers import Binder
from services.binder.reservation_watch import ReservationWatch
from shoal.adapters import kube as k
from shoal.adapters.dedup import SeenIds
from shoal.adapters.http import Readiness, background, build_app
from shoal.adapters.inflight import InFlight
from shoal.adapters.kafka import Consumer
from shoal.adapters.wiring import bus_and_redis
from shoal.errors import PermanentError, TransientError
from shoal.logging import get_logger
from shoal.messages import topics
from shoal.messages.plan import PlanIssued
from shoal.metrics import Metrics

log = get_logger("services.binder")


BINDER = web.AppKey("binder", Binder)
CONSUMER = web.AppKey("consumer", Consumer)


def build(settings: BinderSettings) -> web.Application:
    metrics, readiness = Metrics(), Readiness()
    app = build_app(metrics=metrics, readiness=readiness)
    prefix = settings.topic_prefix

    async def wiring(app: web.Application) -> AsyncIterator[None]:
        api = await k.connect_kube(settings.kube)
        async with bus_and_redis(settings, readiness) as (redis, bus):
            kube = k.Kube(api, request_timeout_s=settings.kube.request_timeout_s)
            binder = Binder(kube=kube, reservations=ReservationWatch(kube, settings.reservation_namespace),
                            inflight=InFlight(redis), seen=SeenIds(redis, consumer=prefix + "binder"), bus=bus, metrics=metrics, topic_prefix=prefix,
                            reservation_namespace=settings.reservation_namespace,
                            reservation_timeout_s=settings.reservation_timeout_s,
                            reservation_image=settings.reservation_image,
                            eviction_mode=settings.eviction_mode,
                            reservation_grace_s=settings.reservation_grace_s, parallel=settings.parallel,
                            sharing_mode_of=settings.mode_for)
            app[BINDER] = binder
            consumer = Consumer(settings.kafka, [topics.PLANS.full(prefix)], group_id=prefix + settings.group_id,
                                message_type=PlanIssued, handler=binder.start_plan, pipeline=settings.pipeline,
                                metrics=metrics)
            app[CONSUMER] = consumer
            async with consumer:
                readiness.add("consumer", consumer.ready)
                yield
        await api.close()

    app.cleanup_ctx.append(wiring)
    app.cleanup_ctx.append(background("binder", lambda app: app[CONSUMER].run()))
    app.cleanup_ctx.append(background("reservation-watch", lambda app: app[BINDER].reservations.run()))

    async def reservation_sync(app: web.Application) -> None:
        while True:
            await asyncio.sleep(settings.reservation_sync_s)
            try:
                await app[BINDER].sync_reservations()
            except (TransientError, PermanentError) as exc:
                log.warning("reservation_sync_failed", error=str(exc))

    app.cleanup_ctx.append(background("reservation-sync", reservation_sync))
    return app

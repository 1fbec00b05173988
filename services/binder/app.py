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
from shoal.adapters.http import background
from shoal.adapters.inflight import InFlight
from shoal.adapters.wiring import Handler, Ports, consumer_app
from shoal.errors import PermanentError, TransientError
from shoal.logging import get_logger
from shoal.messages import topics
from shoal.messages.plan import PlanIssued

log = get_logger("services.binder")


BINDER = web.AppKey("binder", Binder)
KUBE = web.AppKey("kube", k.Kube)


def build(settings: BinderSettings) -> web.Application:
    async def kube_client(app: web.Application) -> AsyncIterator[None]:
        api = await k.connect_kube(settings.kube, component="binder")
        app[KUBE] = k.Kube(api, request_timeout_s=settings.kube.request_timeout_s)
        try:
            yield
        finally:
            await api.close()

    def binder(ports: Ports) -> Handler:
        kube, prefix = ports.app[KUBE], settings.topic_prefix
        service = ports.app[BINDER] = Binder(
            kube=kube, reservations=ReservationWatch(kube, settings.reservation_namespace),
            inflight=InFlight(ports.redis), seen=SeenIds(ports.redis, consumer=prefix + "binder"), bus=ports.bus,
            metrics=ports.metrics, topic_prefix=prefix,
            reservation_namespace=settings.reservation_namespace,
            reservation_timeout_s=settings.reservation_timeout_s,
            reservation_image=settings.reservation_image,
            eviction_mode=settings.eviction_mode,
            reservation_grace_s=settings.reservation_grace_s, parallel=settings.parallel,
            queue_status_interval_s=settings.queue_status_interval_s,
            sharing_mode_of=settings.mode_for, fraction_metadata=settings.fraction_metadata)
        return service.start_plan

    app = consumer_app("binder", settings, topics.PLANS, PlanIssued, binder, group_id=settings.group_id,
                       pipeline=settings.pipeline, contexts=[kube_client])
    async def reservation_watch(app: web.Application) -> None:
        watch = app[BINDER].reservations
        assert watch is not None  # the binder is always made with its watch here
        await watch.run()

    app.cleanup_ctx.append(background("reservation-watch", reservation_watch))

    async def reservation_sync(app: web.Application) -> None:
        while True:
            await asyncio.sleep(settings.reservation_sync_s)
            try:
                await app[BINDER].sync_reservations()
            except (TransientError, PermanentError) as exc:
                log.warning("reservation_sync_failed", error=str(exc))

    app.cleanup_ctx.append(background("reservation-sync", reservation_sync))
    return app

"""Wiring of the podgrouper: one pod watch per scheduler name, a few workers, the Kubernetes client, HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from services.podgrouper.config import PodGrouperSettings
from services.podgrouper.handlers import PodGrouper
from shoal.adapters import kube as k
from shoal.adapters.http import Readiness, background, build_app
from shoal.metrics import Metrics

GROUPER = web.AppKey("podgrouper", PodGrouper)


def build(settings: PodGrouperSettings) -> web.Application:
    metrics, readiness = Metrics(), Readiness()
    app = build_app(metrics=metrics, readiness=readiness)

    async def wiring(app: web.Application) -> AsyncIterator[None]:
        api = await k.connect_kube(settings.kube, component="podgrouper")
        grouper = PodGrouper(kube=k.Kube(api, request_timeout_s=settings.kube.request_timeout_s), metrics=metrics,
                             workers=settings.workers, retry_max_s=settings.retry_max_s,
                             bare_annotate_delay_s=settings.bare_annotate_delay_s)
        app[GROUPER] = grouper
        readiness.add("pods_listed", lambda: grouper.ready(settings.scheduler_names))
        try:
            yield
        finally:
            await api.close()

    async def watch_all(app: web.Application) -> None:
        grouper = app[GROUPER]
        await asyncio.gather(grouper.work(), *(grouper.watch(name, settings.kube.watch_timeout_s)
                                               for name in settings.scheduler_names))

    app.cleanup_ctx.append(wiring)
    app.cleanup_ctx.append(background("podgrouper", watch_all))
    return app

"""Wiring of the snapshotter: watches, Redis store, Kafka publisher, HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from services.snapshotter.config import SnapshotterSettings
from services.snapshotter.handlers import Snapshotter, now_text
from services.snapshotter.mirror import Mirror
from services.snapshotter.translate import Shards
from shoal.adapters import kube as k
from shoal.adapters.http import Readiness, background, build_app
from shoal.adapters.inflight import InFlight
from shoal.adapters.shard_snapshots import SnapshotWriter
from shoal.adapters.wiring import bus_and_redis
from shoal.metrics import Metrics

WATCHED = (k.NODES, k.PODS, k.QUEUES, k.PODGROUPS, k.PRIORITY_CLASSES, k.TOPOLOGIES, k.PDBS)


SNAPSHOTTER = web.AppKey("snapshotter", Snapshotter)
MIRROR = web.AppKey("mirror", Mirror)


def build(settings: SnapshotterSettings) -> web.Application:
    metrics, readiness = Metrics(), Readiness()
    app = build_app(metrics=metrics, readiness=readiness)
    prefix = settings.topic_prefix

    async def wiring(app: web.Application) -> AsyncIterator[None]:
        api = await k.connect_kube(settings.kube, component="snapshotter")
        kube = k.Kube(api, request_timeout_s=settings.kube.request_timeout_s)
        async with bus_and_redis(settings, readiness) as (redis, bus):
            holder: dict = {}
            mirror = Mirror(kube, WATCHED, lambda obj, deleted: holder["s"].on_change(obj, deleted),
                            watch_timeout_s=settings.kube.watch_timeout_s)
            shards = Shards(settings.scheduler_name, shard_prefix=settings.shard_prefix, fixed=settings.shards,
                            raw_pods=lambda: list(mirror.objects.get("Pod", {}).values()), now=now_text)
            holder["s"] = app[SNAPSHOTTER] = Snapshotter(
                mirror=mirror, shards=shards, writer=SnapshotWriter(redis, retain_s=settings.redis.snapshot_retain_s),
                inflight=InFlight(redis), bus=bus, metrics=metrics, debounce_s=settings.debounce_s,
                max_delay_s=settings.max_delay_s, heartbeat_s=settings.heartbeat_s, base_every=settings.base_every,
                sweep_s=settings.inflight_sweep_s,
                topic_prefix=prefix, require_podgroup=settings.require_podgroup)
            app[MIRROR] = mirror
            readiness.add("synced", mirror.synced)
            yield
        await api.close()

    app.cleanup_ctx.append(wiring)
    app.cleanup_ctx.append(background("watches", lambda app: app[MIRROR].run()))
    app.cleanup_ctx.append(background("snapshots", lambda app: app[SNAPSHOTTER].run()))
    return app

"""The dashboard's JSON endpoints (every one a read; all amounts in GPUs, CPU cores, memory bytes).

    GET /v1/cluster[?shard=pool]                     the GPU map: nodes by pool, each GPU a cell, and totals
    GET /v1/queue-tree                               departments → projects with their figures per resource
    GET /v1/pending[?queue=&namespace=&offset=&limit=]   pending PodGroups, newest first, with their reason
    GET /v1/evictions[?queue=&namespace=&offset=&limit=] evicted pods, newest first, with action and evictor
    GET /v1/history[?since=EPOCH_S]                  the over-time samples (GPU allocation per queue)

An empty cluster answers empty lists; Redis failing answers 502 with `{"error": …}`; no Redis connection 503.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from redis.asyncio import Redis

from services.api.access import Access
from services.api.decisions import DecisionIndex, Event
from services.api.gpumap import gpu_map, summary
from services.api.history import History
from services.api.queuetree import queue_tree
from services.api.snapshots import ClusterView
from services.api.workloads import Evictions, page, pending
from shoal.adapters.explain import all_queues
from shoal.core.model import DEFAULT_RESERVATION_NAMESPACE
from shoal.errors import ShoalError
from shoal.logging import get_logger

log = get_logger("services.api")


@dataclass
class Views:
    index: DecisionIndex
    history: History = field(default_factory=History)
    evictions: Evictions = field(default_factory=Evictions)
    reservation_namespace: str = DEFAULT_RESERVATION_NAMESPACE
    redis: Redis | None = None
    cluster: ClusterView | None = None
    access: Access = field(default_factory=lambda: Access(enabled=False))

    def connect(self, redis: Redis) -> None:
        self.redis, self.cluster = redis, ClusterView(redis)

    def on_decision(self, event: Event) -> None:
        self.history.count(event)
        self.evictions.add(event)

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/cluster", self.gpus)
        app.router.add_get("/v1/queue-tree", self.queue_tree)
        app.router.add_get("/v1/pending", self.pending)
        app.router.add_get("/v1/evictions", self.evicted)
        app.router.add_get("/v1/history", self.over_time)

    async def _answer(self, work: Callable[[ClusterView, Redis], Awaitable[Any]]) -> web.Response:
        if self.cluster is None or self.redis is None:
            return web.json_response({"error": "no Redis connection yet"}, status=503)
        try:
            return web.json_response(await work(self.cluster, self.redis))
        except ShoalError as exc:
            log.warning("dashboard_read_failed", error=str(exc))
            return web.json_response({"error": f"reading the cluster failed: {exc}"}, status=502)

    async def gpus(self, request: web.Request) -> web.Response:
        async def work(cluster: ClusterView, redis: Redis) -> dict:
            shards = await cluster.read(request.query.get("shard") or None)
            out, nodes = [], []
            for name, current in shards.items():
                shard_nodes = gpu_map(current.model, reservation_namespace=self.reservation_namespace)
                nodes.extend(shard_nodes)
                out.append({"shard": name, "revision": current.revision, "takenAt": current.taken_at,
                            "nodes": shard_nodes})
            return {"shards": out, "summary": summary(nodes)}

        return await self._answer(work)

    async def queue_tree(self, request: web.Request) -> web.Response:
        async def work(cluster: ClusterView, redis: Redis) -> dict:
            shards = await cluster.read()
            queues = {q.name: q for c in shards.values() for q in c.model.queues.values()}
            return {"shards": queue_tree(queues.values(), await all_queues(redis))}

        return await self._answer(work)

    async def pending(self, request: web.Request) -> web.Response:
        scope = await self.access.scope(request, request.query.get("namespace", ""))  # 403: not theirs

        async def work(cluster: ClusterView, redis: Redis) -> dict:
            shards = await cluster.read()
            items = pending(shards, decisions_for=self.index.about, figures=await all_queues(redis))
            return page(await scope.keep(items, _namespace), request.query)

        return await self._answer(work)

    async def evicted(self, request: web.Request) -> web.Response:
        scope = await self.access.scope(request, request.query.get("namespace", ""))

        async def work(cluster: ClusterView, redis: Redis) -> dict:
            return page(await scope.keep(self.evictions.list(await cluster.read()), _namespace), request.query)

        return await self._answer(work)

    async def over_time(self, request: web.Request) -> web.Response:
        try:
            since = float(request.query["since"]) if request.query.get("since") else None
        except ValueError:
            return web.json_response({"error": "since must be epoch seconds"}, status=400)
        return web.json_response(self.history.json(since))

    async def sample_forever(self, app: web.Application | None = None) -> None:
        """One history sample per interval, from the snapshots (a failed read skips that sample)."""
        while True:
            if self.cluster is not None:
                try:
                    self.history.sample(time.time(), await self.cluster.read(), self.reservation_namespace)
                except ShoalError as exc:
                    log.warning("history_sample_failed", error=str(exc))
                except Exception:  # noqa: BLE001 - odd data costs a sample, never the service
                    log.exception("history_sample_crashed")
            await asyncio.sleep(self.history.interval_s)


def _namespace(item: dict[str, Any]) -> str:
    return str(item.get("namespace") or "")

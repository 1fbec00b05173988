"""HTTP routes of the api service (who may call which: access.py).

    GET /v1/decisions[?subject=ns/name][&shard=pool][&from=latest|beginning]   Server-Sent Events
    GET /v1/decisions/recent[?limit=N][&subject=…][&shard=…]                   the last decisions, JSON
    GET /v1/explain/{namespace}/{name}                                         why pending / why evicted
    GET /v1/queues[?shard=pool]                                                fair-share figures per shard
    GET /                                                                      the dashboard (dashboard.py)

Each SSE event is `id: <decision id>`, `event: decision`, `data: <CloudEvents JSON>`; a comment line
(`: connected`, then `: keepalive` every `heartbeat_s`) keeps proxies from closing an idle stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiohttp import web
from redis.asyncio import Redis

from services.api.access import Access, Scope, event_namespace, namespace_of_subject
from services.api.dashboard import index_page
from services.api.decisions import DecisionIndex, Event, Hub, from_beginning, matches, offer, select
from shoal.adapters import redis_keys
from shoal.adapters.explain import all_queues, explain
from shoal.adapters.kube import Kube
from shoal.adapters.latest_value import LatestValue
from shoal.errors import ShoalError
from shoal.logging import get_logger
from shoal.messages.plan import FairShareComputed
from shoal.metrics import Metrics
from shoal.settings import KafkaSettings

log = get_logger("services.api")


@dataclass
class Api:
    index: DecisionIndex
    hub: Hub
    kafka: KafkaSettings
    topic: str
    metrics: Metrics
    heartbeat_s: float = 15.0
    kube: Kube | None = None
    redis: Redis | None = None
    access: Access = field(default_factory=lambda: Access(enabled=False))

    def __post_init__(self) -> None:
        self._replays: set[asyncio.Queue[Event | None]] = set()
        m = self.metrics
        self.sse_clients = m.gauge("api_sse_clients", "Clients connected to /v1/decisions.")
        self.explains = m.counter("api_explain_requests_total", "Explain requests by outcome.", ["outcome"])
        self.decisions = m.counter("api_decisions_total", "Decisions seen on the decision stream, by type.",
                                   ["type"])

    async def close(self, app: web.Application | None = None) -> None:
        """End every open event stream (at shutdown)."""
        self.hub.close()
        for queue in self._replays:
            offer(queue, None, lambda: None)

    def count(self, event: Event) -> None:
        self.decisions.labels(str(event.get("type", "")).rsplit(".", 1)[-1]).inc()

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/", self.dashboard)
        app.router.add_get("/v1/decisions", self.stream)
        app.router.add_get("/v1/decisions/recent", self.recent)
        app.router.add_get("/v1/explain/{namespace}/{name}", self.explain)
        app.router.add_get("/v1/queues", self.queues)

    async def dashboard(self, request: web.Request) -> web.FileResponse:
        return index_page()

    async def recent(self, request: web.Request) -> web.Response:
        try:
            limit = max(1, min(int(request.query.get("limit", "50")), 1000))
        except ValueError:
            raise web.HTTPBadRequest(text="limit must be an integer") from None
        scope = await self._scope(request)
        events = select(self.index.recent(), subject=request.query.get("subject", ""),
                        shard=request.query.get("shard", ""))
        events = await scope.keep(events, event_namespace)
        return web.json_response({"decisions": events[-limit:]})

    async def _scope(self, request: web.Request) -> Scope:
        """The caller's scope; 403 when `?subject=` names a namespace the caller may not read."""
        return await self.access.scope(request, namespace_of_subject(request.query.get("subject", "")))

    async def _readable(self, scope: Scope, event: Event) -> bool:
        """Whether the caller may see `event` on its open stream (an apiserver failure hides it: fail closed)."""
        try:
            return await scope.reads(event_namespace(event))
        except web.HTTPException:
            return False

    async def stream(self, request: web.Request) -> web.StreamResponse:
        start = request.query.get("from", "latest")
        if start not in ("latest", "beginning"):
            raise web.HTTPBadRequest(text="from must be latest or beginning")
        subject, shard = request.query.get("subject", ""), request.query.get("shard", "")
        scope = await self._scope(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                               "X-Accel-Buffering": "no"})
        async with self._source(start) as queue:
            await response.prepare(request)
            self.sse_clients.inc()
            try:
                await response.write(b": connected\n\n")
                while True:
                    try:
                        event = await asyncio.wait_for(queue.get(), timeout=self.heartbeat_s)
                    except TimeoutError:
                        await response.write(b": keepalive\n\n")
                        continue
                    if event is None:
                        break
                    if matches(event, subject=subject, shard=shard) and await self._readable(scope, event):
                        body = json.dumps(event, separators=(",", ":"))
                        await response.write(f"id: {event.get('id', '')}\nevent: decision\ndata: {body}\n\n".encode())
            except (ConnectionResetError, asyncio.CancelledError):
                pass
            finally:
                self.sse_clients.dec()
        return response

    @contextlib.asynccontextmanager
    async def _source(self, start: str) -> AsyncIterator[asyncio.Queue[Event | None]]:
        if start == "latest":
            async with self.hub.subscribe() as live:
                yield live
            return
        queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize=1000)

        async def pump() -> None:
            try:
                async for event in from_beginning(self.kafka, self.topic):
                    await queue.put(event)
            except ShoalError as exc:
                log.warning("sse_replay_failed", error=str(exc))
                offer(queue, None, lambda: None)

        task = asyncio.create_task(pump(), name="sse-from-beginning")
        self._replays.add(queue)
        try:
            yield queue
        finally:
            self._replays.discard(queue)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def explain(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        if self.kube is None:
            raise web.HTTPServiceUnavailable(text="no Kubernetes connection")
        fair = LatestValue(self.redis, redis_keys.fair_share, FairShareComputed) if self.redis is not None else None
        try:
            answer = await explain(self.kube, fair, namespace, name, decisions_for=self.index.about)
        except ShoalError as exc:
            self.explains.labels("error").inc()
            log.warning("explain_failed", subject=f"{namespace}/{name}", error=str(exc))
            return web.json_response({"error": str(exc)}, status=502)
        found = answer["found"] or bool(answer["decisions"])
        self.explains.labels("found" if found else "not_found").inc()
        return web.json_response(answer, status=200 if found else 404)

    async def queues(self, request: web.Request) -> web.Response:
        if self.redis is None:
            raise web.HTTPServiceUnavailable(text="no Redis connection")
        try:
            shards = await all_queues(self.redis, shard=request.query.get("shard") or None)
        except ShoalError as exc:
            return web.json_response({"error": str(exc)}, status=502)
        return web.json_response({"shards": shards})


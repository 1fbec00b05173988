"""The health/metrics server over a real socket, and the service lifecycle built on cleanup contexts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from shoal.adapters.http import Readiness, background, build_app, run_service, serve
from shoal.metrics import Metrics
from shoal.settings import HttpSettings


async def get(port: int, path: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


async def test_healthz_readyz_and_metrics_over_a_socket() -> None:
    metrics, readiness = Metrics(), Readiness(timeout_s=0.3)
    kafka_up = {"value": False}
    readiness.add("kafka", lambda: kafka_up["value"])

    async def redis_ping() -> bool:
        return True

    readiness.add("redis", redis_ping)
    bound = metrics.counter("binds_total", "Pods bound.", ["shard"])
    bound.labels(shard="pool-a").inc(3)
    metrics.histogram("cycle_seconds", "Planner cycle time.").observe(0.042)
    metrics.gauge("pending_podgroups", "Pending podgroups.").set(7)
    assert metrics.counter("binds_total", "Pods bound.", ["shard"]) is bound  # declared twice, one metric

    async with serve(build_app(metrics=metrics, readiness=readiness), "127.0.0.1", 0) as port:
        assert (await get(port, "/healthz"))[0] == 200

        status, _, body = await get(port, "/readyz")
        assert status == 503 and '"kafka":false' in body.replace(" ", "") and '"redis":true' in body.replace(" ", "")
        kafka_up["value"] = True
        assert (await get(port, "/readyz"))[0] == 200

        async def hangs() -> bool:
            await asyncio.sleep(10)
            return True

        def raises() -> bool:
            raise ConnectionError("refused")

        readiness.add("slow", hangs)
        assert (await get(port, "/readyz"))[0] == 503  # a hanging check times out: not ready
        readiness.remove("slow")
        readiness.add("broken", raises)
        assert (await get(port, "/readyz"))[0] == 503
        readiness.remove("broken")

        status, content_type, text = await get(port, "/metrics")
        assert status == 200 and content_type.startswith("text/plain")
        assert 'shoal_binds_total{shard="pool-a"} 3.0' in text
        assert "shoal_cycle_seconds_bucket{le=\"0.05\"} 1.0" in text
        assert "shoal_pending_podgroups 7.0" in text
        assert "# TYPE shoal_binds_total counter" in text
        assert (await get(port, "/nope"))[0] == 404


async def test_cleanup_contexts_pair_setup_and_teardown_and_background_runs() -> None:
    events: list[str] = []
    ticks = asyncio.Event()

    async def resource(app: web.Application) -> AsyncIterator[None]:
        events.append("setup")
        yield
        events.append("teardown")

    async def loop(app: web.Application) -> None:
        try:
            while True:
                ticks.set()
                await asyncio.sleep(0.01)
        finally:
            events.append("loop_cancelled")

    app = build_app()
    app.cleanup_ctx.append(resource)
    app.cleanup_ctx.append(background("loop", loop))
    stop = asyncio.Event()
    service = asyncio.create_task(run_service(app, HttpSettings(port=0), stop=stop))
    await asyncio.wait_for(ticks.wait(), 10)
    assert events == ["setup"]
    stop.set()
    await asyncio.wait_for(service, 10)
    assert events == ["setup", "loop_cancelled", "teardown"]  # reverse order of setup


async def test_a_crashed_background_task_stops_the_service_with_its_error() -> None:
    released: list[str] = []

    async def resource(app: web.Application) -> AsyncIterator[None]:
        yield
        released.append("resource")

    async def crashes(app: web.Application) -> None:
        await asyncio.sleep(0.05)
        raise RuntimeError("snapshot invariant broken")

    app = build_app()
    app.cleanup_ctx.append(resource)
    app.cleanup_ctx.append(background("crashes", crashes))
    with pytest.raises(RuntimeError, match="snapshot invariant broken"):
        await asyncio.wait_for(run_service(app, HttpSettings(port=0)), 10)
    assert released == ["resource"]

"""Prometheus as the optional usage source: range queries over HTTP → buckets → the same usage maths.

Prometheus itself is not part of the test stack; a small HTTP server answers `/api/v1/query_range` in
Prometheus's response format, from series defined by the test, and records the queries it was asked.
"""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest
from aiohttp import web

from shoal.adapters.http import serve
from shoal.adapters.prometheus_usage import PrometheusUsage
from shoal.adapters.usage_history import UsageHistory, UsageSettings, usage_source
from shoal.core.usage import UsageParams
from shoal.errors import PermanentError
from shoal.settings import load_settings

P = UsageParams(bucket_s=60, window_s=600)
NOW = 6000.0


def fake_prometheus(series: dict[str, list[dict]], asked: list[dict]) -> web.Application:
    async def query_range(request: web.Request) -> web.Response:
        q = {k: v[0] for k, v in parse_qs(request.query_string).items()}
        asked.append(q)
        if "broken" in q["query"]:
            return web.json_response({"status": "error", "errorType": "bad_data", "error": "parse error"},
                                     status=400)
        start, end, step = float(q["start"]), float(q["end"]), float(q["step"])
        times = [start + i * step for i in range(int((end - start) // step) + 1)]
        result = []
        for s in series.get(q["query"], []):
            values = [[t, str(s["value"](t))] for t in times if s["value"](t) is not None]
            result.append({"metric": s.get("metric", {}), "values": values})
        return web.json_response({"status": "success", "data": {"resultType": "matrix", "result": result}})

    app = web.Application()
    app.router.add_get("/api/v1/query_range", query_range)
    return app


def cap(resource: str) -> str:
    return f'sum(shoal_shard_capacity{{shard="pool-a",resource="{resource}"}})'


def alloc(resource: str) -> str:
    return f'sum by (queue) (shoal_queue_allocated{{shard="pool-a",resource="{resource}"}})'


async def test_usage_from_range_queries_matches_the_history_maths():
    series = {
        cap("gpu"): [{"value": lambda t: 16}],
        # queue a held 8 GPUs during the second half of the window, b 4 GPUs all along
        alloc("gpu"): [{"metric": {"queue": "a"}, "value": lambda t: 8 if t >= NOW - 300 else 0},
                       {"metric": {"queue": "b"}, "value": lambda t: 4}],
        cap("cpu"): [{"value": lambda t: 64}],
        alloc("cpu"): [{"metric": {"queue": "a"}, "value": lambda t: 32}],
    }
    asked: list[dict] = []
    async with serve(fake_prometheus(series, asked)) as port:
        source = PrometheusUsage(f"http://127.0.0.1:{port}", P)
        try:
            usage = await source.usage("pool-a", now_s=NOW)
            again = await source.usage("pool-a", now_s=NOW + 1)  # cached for refresh_s
        finally:
            await source.close()
    assert usage == again
    points = 11  # start .. end inclusive at a 60 s step
    assert usage["a"]["gpu"] == pytest.approx(8 * 6 / (16 * points))  # 6 of the 11 points at 8 GPUs
    assert usage["b"]["gpu"] == pytest.approx(0.25)
    assert usage["a"]["cpu"] == pytest.approx(0.5)
    assert usage["a"]["memory"] == 0.0  # no memory capacity series: 0
    assert len(asked) == 6  # capacity and allocation for gpu, cpu, memory; the second call was cached
    assert {q["step"] for q in asked} == {"60"} and float(asked[0]["start"]) == NOW - 600


async def test_half_life_is_applied_to_the_prometheus_points():
    series = {cap("gpu"): [{"value": lambda t: 10}],
              alloc("gpu"): [{"metric": {"queue": "old"}, "value": lambda t: 10 if t < NOW - 300 else None},
                             {"metric": {"queue": "new"}, "value": lambda t: 10 if t >= NOW - 300 else None}]}
    async with serve(fake_prometheus(series, [])) as port:
        source = PrometheusUsage(f"http://127.0.0.1:{port}", UsageParams(bucket_s=60, window_s=600, half_life_s=60))
        try:
            usage = await source.usage("pool-a", now_s=NOW)
        finally:
            await source.close()
    assert usage["new"]["gpu"] > 0.9 > 0.05 > usage["old"]["gpu"] > 0


async def test_a_prometheus_error_is_reported_not_hidden():
    async with serve(fake_prometheus({}, [])) as port:
        source = PrometheusUsage(f"http://127.0.0.1:{port}", P, capacity_query="broken($resource)")
        try:
            with pytest.raises(PermanentError, match="bad_data parse error"):
                await source.usage("pool-a", now_s=NOW)
        finally:
            await source.close()


def test_the_source_is_chosen_by_settings():
    settings = load_settings(UsageSettings, {"SHOAL_USAGE_SOURCE": "prometheus",
                                             "SHOAL_USAGE_PROMETHEUS_URL": "http://prom:9090"}, prefix="SHOAL_USAGE_")
    source = usage_source(None, settings)  # type: ignore[arg-type]
    assert isinstance(source, PrometheusUsage) and source.url == "http://prom:9090"
    assert "$shard" in source.allocation_query
    with pytest.raises(Exception, match="SHOAL_USAGE_PROMETHEUS_URL"):
        load_settings(UsageSettings, {"SHOAL_USAGE_SOURCE": "prometheus"}, prefix="SHOAL_USAGE_")
    assert usage_source(None, UsageSettings(enabled=False)) is None  # type: ignore[arg-type]
    assert isinstance(usage_source(FakeRedis(), UsageSettings()), UsageHistory)  # type: ignore[arg-type]


class FakeRedis:
    def register_script(self, script: str) -> object:
        return object()

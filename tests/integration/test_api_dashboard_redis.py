"""The dashboard's endpoints against a real Redis (a database of its own on the stack's server): an empty
cluster answers empty lists, a stored snapshot is drawn, a shard whose snapshot does not decode is left out
(never a crash), and the history sampler records the snapshot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest_asyncio
from redis.asyncio import Redis

from services.api.decisions import DecisionIndex
from services.api.history import History
from services.api.views import Views
from shoal.adapters import redis_keys
from shoal.adapters.http import build_app, serve
from shoal.adapters.redis_client import connect_redis
from shoal.adapters.shard_snapshots import SnapshotWriter
from shoal.core.ingest.shard_model import Entries, PodEntry
from shoal.core.model import Node, Pod, PodGroup, Queue

T = "2026-01-01T00:00:00Z"


@pytest_asyncio.fixture
async def redis(stack: Any) -> AsyncIterator[Redis]:
    from shoal.settings import RedisSettings

    client = connect_redis(RedisSettings(url=stack.redis_url.rsplit("/", 1)[0] + "/8"))
    await client.flushdb()
    try:
        yield client
    finally:
        await client.flushdb()
        await client.aclose()


async def get(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def test_dashboard_endpoints_on_redis(redis: Redis) -> None:
    index = DecisionIndex()
    views = Views(index=index, history=History(size=5, interval_s=0.2))
    views.connect(redis)
    app = build_app()
    views.routes(app)
    async with serve(app) as port, aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{port}"
        assert await get(http, base + "/v1/cluster") == {"shards": [], "summary": {
            "nodes": 0, "gpus": 0, "gpusInUse": 0, "cells": {"whole": 0, "shared": 0, "releasing": 0, "free": 0}}}
        assert await get(http, base + "/v1/queue-tree") == {"shards": {}}
        assert (await get(http, base + "/v1/pending"))["items"] == []
        assert (await get(http, base + "/v1/evictions"))["total"] == 0

        entries = Entries(nodes=(Node(name="n1", pool="pool-x", gpus=2),),
                          pods=(PodEntry(pod=Pod(uid="u1", namespace="ns", name="run-0", node_name="n1", gpus=1,
                                                 pod_group="run", phase="Running")),
                                PodEntry(pod=Pod(uid="u2", namespace="ns", name="wait-0", gpus=2,
                                                 pod_group="wait"))),
                          pod_groups=(PodGroup(namespace="ns", name="run", queue="q"),
                                      PodGroup(namespace="ns", name="wait", queue="q", created=T)),
                          queues=(Queue(name="q"),))
        assert await SnapshotWriter(redis).publish_base("pool-x", 3, entries, taken_at=T)
        await redis.set(redis_keys.snapshot_latest("pool-broken"), b"1")  # a pointer to a base that is garbage
        await redis.set(redis_keys.snapshot_base_latest("pool-broken"), b"1")
        await redis.set(redis_keys.snapshot_base("pool-broken", 1), b"\xc1 not msgpack")
        index.add({"id": "e1", "type": "io.shoal.decision.evicted", "subject": "ns/old-0", "shard": "pool-x",
                   "time": T, "data": {"podGroup": "ns/run", "action": "preempt", "by": "ns/wait", "message": "m"}})
        views.on_decision(index.recent()[-1])

        cluster = await get(http, base + "/v1/cluster")
        assert [s["shard"] for s in cluster["shards"]] == ["pool-x"] and cluster["shards"][0]["revision"] == 3
        (node,) = cluster["shards"][0]["nodes"]
        assert [c["state"] for c in node["cells"]] == ["whole", "free"] and cluster["summary"]["gpusInUse"] == 1
        tree = await get(http, base + "/v1/queue-tree")
        assert [r["name"] for r in tree["shards"][""]["roots"]] == ["q"]  # no fair-share figures published yet
        pending = await get(http, base + "/v1/pending?queue=q")
        assert [i["podGroup"] for i in pending["items"]] == ["ns/wait"] and pending["queues"] == ["q"]
        evictions = await get(http, base + "/v1/evictions")
        assert evictions["items"][0]["action"] == "preempt" and evictions["items"][0]["queue"] == "q"

        sampler = asyncio.create_task(views.sample_forever())
        try:
            async def sampled() -> dict:
                while not (history := await get(http, base + "/v1/history"))["samples"]:
                    await asyncio.sleep(0.1)
                return history

            history = await asyncio.wait_for(sampled(), 10)
        finally:
            sampler.cancel()
        sample = history["samples"][-1]
        assert (sample["capacity"], sample["allocated"], sample["queues"]) == (2, 1.0, {"q": 1.0})
        assert sample["decisions"] == {"evicted": 1} or history["samples"][0]["decisions"] == {"evicted": 1}

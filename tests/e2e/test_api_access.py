"""Who may read what on the api (services/api/access.py), on the real apiserver and Redis: two users, each a
ServiceAccount bound to `shoal-viewer` in their own namespace, see only their namespace's explanations, decisions
(recent and live), pending and evicted workloads, and get 403 naming the permission on the other's; a cluster
reader (`shoal-cluster-viewer`, `shoal-metrics-reader`) sees all, the queues and /metrics; an anonymous caller
gets 401; /healthz stays open; an apiserver that does not answer gives 503, never data."""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest_asyncio
from access_users import bind_in_namespace, bound_cluster_wide, token_of, viewer_roles
from redis.asyncio import Redis

from services.api.access import Access
from services.api.decisions import DecisionIndex, Hub
from services.api.handlers import Api
from services.api.views import Views
from shoal.adapters.http import METRICS, build_app, serve
from shoal.adapters.kube import NAMESPACES, PODS, Kube
from shoal.adapters.redis_client import connect_redis
from shoal.adapters.shard_snapshots import SnapshotWriter
from shoal.core.ingest.shard_model import Entries, PodEntry
from shoal.core.model import Pod, PodGroup, Queue
from shoal.settings import KafkaSettings, RedisSettings

T = "2026-01-01T00:00:00Z"


@dataclass
class Setup:
    base: str
    a: str  # namespaces
    b: str
    alice: str  # tokens: alice reads a, bob reads b, carol reads everything
    bob: str
    carol: str
    api: Api
    access: Access


def decision(kind: str, subject: str, n: int, **data: Any) -> dict:
    return {"id": f"{subject}-{kind}-{n}", "type": f"io.shoal.decision.{kind}", "subject": subject,
            "shard": "pool-x", "time": f"2026-01-01T00:00:0{n}Z", "data": data}


def app_for(kube: Kube, redis: Redis, index: DecisionIndex, access: Access) -> tuple[Any, Api, Views]:
    """The api's routes as services/api/app.py wires them, without the Kafka tail (decisions are added here)."""
    app = build_app()
    app.middlewares.append(access.middleware)
    api = Api(index=index, hub=Hub(), kafka=KafkaSettings(), topic="unused", metrics=app[METRICS], kube=kube,
              redis=redis, heartbeat_s=1.0, access=access)
    views = Views(index=index, access=access)
    views.connect(redis)
    api.routes(app)
    views.routes(app)
    return app, api, views


@contextlib.asynccontextmanager
async def namespaces(kube: Kube, count: int) -> AsyncIterator[list[str]]:
    names = [f"t-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    for name in names:
        await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield names
    finally:
        for name in names:
            with contextlib.suppress(Exception):
                await kube.delete(NAMESPACES, name)


def pending_pod(namespace: str, name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulerName": "nobody-schedules-this", "containers": [{"name": "c", "image": "busybox"}]}}


@pytest_asyncio.fixture
async def setup(stack: Any, kube_api: Any) -> AsyncIterator[Setup]:
    kube = Kube(kube_api)
    redis = connect_redis(RedisSettings(url=stack.redis_url.rsplit("/", 1)[0] + "/9"))
    await redis.flushdb()
    async with viewer_roles(kube), namespaces(kube, 2) as (a, b):
        alice, bob, carol = (await token_of(kube, a, "alice"), await token_of(kube, b, "bob"),
                             await token_of(kube, a, "carol"))
        await bind_in_namespace(kube, a, "alice")
        await bind_in_namespace(kube, b, "bob")
        for ns in (a, b):
            await kube.create(PODS, pending_pod(ns, "train-0"), namespace=ns)
        entries = Entries(pods=tuple(PodEntry(pod=Pod(uid=f"u-{ns}", namespace=ns, name="wait-0", gpus=1,
                                                      pod_group="wait")) for ns in (a, b)),
                          pod_groups=tuple(PodGroup(namespace=ns, name="wait", queue="q", created=T) for ns in (a, b)),
                          queues=(Queue(name="q"),))
        assert await SnapshotWriter(redis).publish_base("pool-x", 1, entries, taken_at=T)
        index = DecisionIndex()
        access = Access(enabled=True, ttl_s=10, size=100, kube=kube)
        app, api, views = app_for(kube, redis, index, access)
        for n, ns in enumerate((a, b)):
            for event in (decision("unschedulable", f"{ns}/train-0", n, reason="R", message="m"),
                          decision("evicted", f"{ns}/old-0", n, podGroup=f"{ns}/wait", action="preempt")):
                index.add(event)
                views.on_decision(event)  # as the Kafka tail does
        async with bound_cluster_wide(kube, a, "carol", "shoal-cluster-viewer", "shoal-metrics-reader"), \
                serve(app) as port:
            yield Setup(f"http://127.0.0.1:{port}", a, b, alice, bob, carol, api, access)
    await redis.flushdb()
    await redis.aclose()


async def call(setup: Setup, path: str, token: str | None, header: str = "Authorization") -> tuple[int, Any]:
    headers = {header: f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http, http.get(setup.base + path, headers=headers) as resp:
        text = await resp.text()
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text


async def test_each_user_reads_only_their_namespace(setup: Setup) -> None:
    for token, mine, other in ((setup.alice, setup.a, setup.b), (setup.bob, setup.b, setup.a)):
        status, body = await call(setup, "/v1/decisions/recent", token)
        assert status == 200 and {d["subject"].split("/")[0] for d in body["decisions"]} == {mine}, body
        status, body = await call(setup, f"/v1/decisions/recent?subject={other}/train-0", token)
        assert status == 403 and body["missing"]["namespace"] == other and "shoal-viewer" in body["error"], body
        status, body = await call(setup, f"/v1/explain/{mine}/train-0", token)
        assert status == 200 and body["subject"] == f"{mine}/train-0" and body["decisions"], body
        status, body = await call(setup, f"/v1/explain/{other}/train-0", token)
        assert status == 403 and f"may not get pods in namespace {other}" in body["error"], body
        status, body = await call(setup, "/v1/pending", token)
        assert status == 200 and [i["podGroup"] for i in body["items"]] == [f"{mine}/wait"], body
        assert (await call(setup, f"/v1/pending?namespace={other}", token))[0] == 403
        status, body = await call(setup, "/v1/evictions", token)
        assert status == 200 and [i["pod"] for i in body["items"]] == [f"{mine}/old-0"], body
        for cluster_wide in ("/v1/queues", "/v1/cluster", "/v1/queue-tree", "/v1/history"):
            status, body = await call(setup, cluster_wide, token)
            assert status == 403 and body["missing"]["resource"] == "clusterviews", (cluster_wide, body)
            assert "shoal-cluster-viewer" in body["error"]
        status, body = await call(setup, "/metrics", token)
        assert status == 403 and body["missing"]["path"] == "/metrics", body


async def test_a_cluster_reader_sees_every_namespace_and_the_metrics(setup: Setup) -> None:
    status, body = await call(setup, "/v1/decisions/recent", setup.carol)
    assert status == 200 and {d["subject"].split("/")[0] for d in body["decisions"]} == {setup.a, setup.b}
    for ns in (setup.a, setup.b):
        assert (await call(setup, f"/v1/explain/{ns}/train-0", setup.carol))[0] == 200
    status, body = await call(setup, "/v1/pending", setup.carol)
    assert sorted(i["podGroup"] for i in body["items"]) == sorted(f"{ns}/wait" for ns in (setup.a, setup.b))
    assert len((await call(setup, "/v1/evictions", setup.carol))[1]["items"]) == 2
    for path in ("/v1/queues", "/v1/cluster", "/v1/queue-tree", "/v1/history"):
        assert (await call(setup, path, setup.carol))[0] == 200, path
    status, text = await call(setup, "/metrics", setup.carol)
    assert status == 200 and "api_sse_clients" in text


async def test_anonymous_and_unknown_tokens_get_401_health_stays_open(setup: Setup) -> None:
    for path in ("/v1/decisions/recent", "/v1/decisions", f"/v1/explain/{setup.a}/train-0", "/v1/queues",
                 "/v1/pending", "/metrics"):
        status, body = await call(setup, path, None)
        assert status == 401 and "no bearer token" in body["error"], (path, body)
        status, body = await call(setup, path, "not-a-token")
        assert status == 401 and "did not accept the token" in body["error"], (path, body)
    for path in ("/healthz", "/readyz", "/"):
        assert (await call(setup, path, None))[0] == 200, path
    # the header `kubectl shoal` sends through the apiserver's proxy (which drops Authorization)
    status, body = await call(setup, f"/v1/explain/{setup.a}/train-0", setup.alice, "X-Shoal-Authorization")
    assert status == 200 and body["subject"] == f"{setup.a}/train-0"


async def read_events(resp: aiohttp.ClientResponse, count: int) -> list[str]:
    subjects: list[str] = []
    async with asyncio.timeout(20):
        while len(subjects) < count:
            line = (await resp.content.readline()).decode()
            if line.startswith("data: "):
                subjects.append(json.loads(line[6:])["subject"])
    return subjects


async def test_the_live_stream_carries_only_what_the_caller_may_read(setup: Setup) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        streams = {}
        for who in ("alice", "carol"):
            resp = await http.get(setup.base + "/v1/decisions",
                                  headers={"Authorization": f"Bearer {getattr(setup, who)}"})
            assert resp.status == 200 and await resp.content.readline() == b": connected\n"
            streams[who] = resp
        for n, ns in enumerate((setup.b, setup.a, setup.b, setup.a)):
            setup.api.hub.publish(decision("bound", f"{ns}/live-{n}", n, node="n1"))
        assert await read_events(streams["alice"], 2) == [f"{setup.a}/live-1", f"{setup.a}/live-3"]
        assert await read_events(streams["carol"], 4) == [f"{ns}/live-{n}" for n, ns in
                                                          enumerate((setup.b, setup.a, setup.b, setup.a))]
        for resp in streams.values():
            resp.close()
        async with http.get(setup.base + f"/v1/decisions?subject={setup.b}/live-0",
                            headers={"Authorization": f"Bearer {setup.alice}"}) as resp:
            assert resp.status == 403


async def timed(setup: Setup, path: str, token: str | None) -> float:
    started = time.perf_counter()
    assert (await call(setup, path, token))[0] == 200
    return (time.perf_counter() - started) * 1000


async def test_answers_are_cached_and_an_apiserver_that_does_not_answer_gives_503(setup: Setup, stack: Any) -> None:
    path = f"/v1/explain/{setup.a}/train-0"
    cold = await timed(setup, path, setup.alice)
    warm = [await timed(setup, path, setup.alice) for _ in range(100)]
    # one TokenReview for alice, two SubjectAccessReviews (pods, podgroups in her namespace), reused since
    assert (len(setup.access.tokens), len(setup.access.reviews)) == (1, 2)
    setup.access.enabled = False
    off = [await timed(setup, path, None) for _ in range(100)]
    setup.access.enabled = True
    # reported, not asserted (a shared machine): what the reviews add to a request
    print(f"\nexplain: first request of a token {cold:.1f} ms; then median {statistics.median(warm):.1f} ms with "
          f"authorisation (cached), {statistics.median(off):.1f} ms without (100 requests each)")

    from kubernetes_asyncio import client

    from shoal.devstack.procs import free_port

    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    dead = client.ApiClient(cfg)
    try:
        setup.access.kube = Kube(dead, request_timeout_s=2)
        fresh = Access(enabled=True, kube=Kube(dead, request_timeout_s=2))
        setup.access.tokens, setup.access.reviews = fresh.tokens, fresh.reviews
        status, body = await call(setup, f"/v1/explain/{setup.a}/train-0", setup.alice)
        assert status == 503 and "authorisation unavailable" in body["error"], body
    finally:
        await dead.close()

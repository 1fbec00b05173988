"""The api service's decision index, fan-out and SSE framing (no Kafka: events are handed to the hub)."""

from __future__ import annotations

import asyncio

import aiohttp

from services.api.decisions import DecisionIndex, Hub, matches
from services.api.handlers import Api
from shoal.adapters.http import build_app, serve
from shoal.metrics import Metrics
from shoal.settings import KafkaSettings


def event(i: int, subject: str = "ns/p-0", shard: str = "pool-a", kind: str = "scheduled", group: str = "ns/pg"):
    return {"id": str(i), "type": f"io.shoal.decision.{kind}", "subject": subject, "shard": shard,
            "time": f"2026-01-01T00:00:{i:02d}Z", "data": {"node": "n1", "podGroup": group}}


def test_index_is_bounded_deduplicated_and_files_pods_under_their_group():
    index = DecisionIndex(per_subject=3, subjects=2, recent=4)
    assert index.add(event(1)) and not index.add(event(1))
    for i in range(2, 6):
        index.add(event(i))
    assert [e["id"] for e in index.about(["ns/p-0"])] == ["3", "4", "5"]  # the last 3 of this subject
    assert [e["id"] for e in index.about(["ns/pg", "ns/p-0"])] == ["3", "4", "5"]  # each once
    index.add(event(6, subject="ns/other", group="ns/other-pg"))
    assert index.about(["ns/p-0"]) == []  # least recently updated subject dropped (2 subjects kept)
    assert len(index) == 2 and [e["id"] for e in index.recent()] == ["3", "4", "5", "6"]


def test_filters():
    e = event(1)
    assert matches(e) and matches(e, subject="ns/p-0") and matches(e, subject="ns/pg")
    assert matches(e, shard="pool-a", subject="ns/pg") and not matches(e, shard="pool-b")
    assert not matches(e, subject="ns/p-1")


async def test_a_slow_subscriber_loses_its_oldest_events_only():
    dropped = []
    hub = Hub(queue_size=2, on_drop=lambda: dropped.append(1))
    async with hub.subscribe() as queue:
        for i in range(4):
            hub.publish(event(i))
        assert [queue.get_nowait()["id"] for _ in range(2)] == ["2", "3"] and len(dropped) == 2
    assert hub.clients == 0


async def test_sse_stream_frames_filters_and_ends_at_shutdown():
    api = Api(index=DecisionIndex(), hub=Hub(), kafka=KafkaSettings(), topic="t", metrics=Metrics(), heartbeat_s=0.2)
    app = build_app(metrics=api.metrics)
    api.routes(app)
    async with serve(app) as port, aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/v1/decisions?from=nowhere") as bad:
            assert bad.status == 400
        async with http.get(f"http://127.0.0.1:{port}/v1/decisions?subject=ns/pg&shard=pool-a") as resp:
            assert await resp.content.readline() == b": connected\n"
            assert await resp.content.readline() == b"\n"
            api.hub.publish(event(1, shard="pool-b"))  # filtered out
            api.hub.publish(event(2))
            lines = [await resp.content.readline() for _ in range(4)]
            assert lines[0] == b"id: 2\n" and lines[1] == b"event: decision\n"
            assert lines[2].startswith(b'data: {"id":"2"') and lines[3] == b"\n"
            assert await resp.content.readline() == b": keepalive\n"
            await api.close()
            assert await asyncio.wait_for(resp.content.read(), 5) == b"\n"  # the rest of the keepalive, then EOF
        async with http.get(f"http://127.0.0.1:{port}/v1/explain/ns/x") as resp:
            assert resp.status == 503  # no apiserver connection configured

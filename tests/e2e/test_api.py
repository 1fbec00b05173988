"""The api service on the real stack: SSE carries the running scheduler's decisions, explain answers why a gang
is pending with the queue's figures (effective limit included), the queues endpoint lists the test's queue."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
from e2e_helpers import api_service, eventually

from shoal.adapters.kube import PODGROUPS, PODS, QUEUES

SCHEMA = json.loads((Path(__file__).parents[1] / "contracts" / "decision.schema.json").read_text())


@pytest.fixture(scope="module")
def api_url(shoal: Any, stack: Any) -> Iterator[str]:
    """A `shoal-api` process on the same topics as the session's services."""
    yield from api_service(shoal, stack)


def pods(namespace: str, queue: str, pool: str, group: str, size: int, gpus: int = 1) -> list[dict]:
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{group}-{i}", "namespace": namespace, "annotations": {"pod-group-name": group},
                          "labels": {"kai.scheduler/queue": queue, "kai.scheduler/node-pool": pool}},
             "spec": {"schedulerName": "shoal-scheduler", "terminationGracePeriodSeconds": 0,
                      "containers": [{"name": "main", "image": "busybox",
                                      "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
            for i in range(size)]


async def gang(kube: Any, namespace: str, queue: str, pool: str, name: str, size: int) -> None:
    await kube.create(PODGROUPS, {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kai.scheduler/node-pool": pool}},
        "spec": {"minMember": size, "queue": queue, "priorityClassName": "train"}}, namespace=namespace)
    for pod in pods(namespace, queue, pool, name, size):
        await kube.create(PODS, pod, namespace=namespace)


async def get_json(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
        return resp.status, await resp.json()


async def read_sse(resp: aiohttp.ClientResponse, want, timeout_s: float) -> list[dict]:
    """Events from an open SSE response until `want(events)` is true."""
    events: list[dict] = []
    async with asyncio.timeout(timeout_s):
        while not want(events):
            line = (await resp.content.readline()).decode().rstrip("\n")
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: "):]))
    return events


async def test_sse_delivers_the_scheduler_decisions(api_url, kube, namespace, queue, node_pool, gpu_nodes):
    await gpu_nodes(1, gpus=2)
    async with aiohttp.ClientSession() as http, \
            http.get(f"{api_url}/v1/decisions?shard={node_pool}", timeout=aiohttp.ClientTimeout(total=120)) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
        assert (await resp.content.readline()) == b": connected\n"  # subscribed: nothing after this is missed
        await gang(kube, namespace, queue, node_pool, "duo", 2)
        subjects = {f"{namespace}/duo-0", f"{namespace}/duo-1"}

        def bound(events):
            return subjects <= {e["subject"] for e in events if e["type"] == "io.shoal.decision.bound"}

        events = await read_sse(resp, bound, 90)
    for event in events:
        jsonschema.validate(event, SCHEMA)
        assert event["shard"] == node_pool  # the filter holds
    scheduled = [e for e in events if e["type"] == "io.shoal.decision.scheduled" and e["subject"] in subjects]
    assert len(scheduled) == 2 and len({e["planid"] for e in scheduled}) == 1
    assert all(e["data"]["node"] == f"{node_pool}-n1" for e in scheduled)

    # from the beginning, filtered by subject: the same decisions replayed to a late subscriber
    async with aiohttp.ClientSession() as http, \
            http.get(f"{api_url}/v1/decisions?from=beginning&subject={namespace}/duo",
                     timeout=aiohttp.ClientTimeout(total=60)) as resp:
        replayed = await read_sse(resp, bound, 30)
    assert {e["id"] for e in scheduled} <= {e["id"] for e in replayed}
    assert all(e["data"].get("podGroup") == f"{namespace}/duo" or e["subject"] == f"{namespace}/duo"
               for e in replayed)
    status, body = await get_json(f"{api_url}/v1/decisions/recent?subject={namespace}/duo")
    assert status == 200 and {e["id"] for e in scheduled} <= {e["id"] for e in body["decisions"]}
    async with aiohttp.ClientSession() as http, http.get(f"{api_url}/metrics") as resp:
        metrics = await resp.text()
    assert 'shoal_api_decisions_total{type="scheduled"}' in metrics and "shoal_api_sse_clients" in metrics


async def test_explain_a_pending_gang(api_url, kube, namespace, queue, node_pool, gpu_nodes):
    await gpu_nodes(2, gpus=2)
    await gang(kube, namespace, queue, node_pool, "quint", 5)

    async def pending():
        status, body = await get_json(f"{api_url}/v1/explain/{namespace}/quint-0")
        ok = status == 200 and body["status"] == "pending" and body["queueFigures"]
        # the verdict comes from the binder's condition, the figures from the fairshare service's latest
        # publication (`fairShareRevision`), which may be of a revision before all five pods and both nodes
        ok = ok and body["queueFigures"]["gpu"]["request"] == 5 and body["queueFigures"]["gpu"]["fairShare"] == 4
        return body if ok and body["schedulingConditions"] else None  # the binder wrote the condition

    answer = await eventually(pending, timeout_s=90, what="explain to say the gang is pending")
    assert answer["verdict"].startswith("pending: ")
    assert "Resources were found for 4 pods while 5 are required for gang scheduling" in answer["verdict"]
    assert answer["podGroup"] == f"{namespace}/quint" and answer["queue"] == queue and answer["shard"] == node_pool
    gpu = answer["queueFigures"]["gpu"]
    assert (gpu["fairShare"], gpu["allocated"], gpu["limit"], gpu["request"]) == (4, 0, -1, 5)
    assert f"queue {queue}: fair share 4 GPUs, allocated 0, limit unlimited" in answer["queueLine"]
    assert any(d["type"] == "io.shoal.decision.unschedulable" for d in answer["decisions"])
    status, group = await get_json(f"{api_url}/v1/explain/{namespace}/quint")  # the pod group itself
    assert status == 200 and group["kind"] == "PodGroup" and group["verdict"] == answer["verdict"]
    status, missing = await get_json(f"{api_url}/v1/explain/{namespace}/no-such-pod")
    assert status == 404 and missing["status"] == "unknown"

    import contextlib
    import io

    from shoal.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = await asyncio.to_thread(main, ["explain", "quint-0", "-n", namespace, "--api", api_url])
    assert code == 0
    first, second = out.getvalue().splitlines()[:2]
    assert first.startswith(f"{namespace}/quint-0: pending: ") and "while 5 are required" in first
    assert second.startswith(f"queue {queue}: fair share 4 GPUs, allocated 0, limit unlimited")


async def test_explain_shows_the_effective_limit_of_an_omitted_limit(api_url, kube, namespace, node_pool,
                                                                      gpu_nodes):
    await gpu_nodes(2, gpus=4)
    name = f"capped-{node_pool}"
    await kube.create(QUEUES, {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
                               "spec": {"resources": {"gpu": {"quota": 4, "overQuotaWeight": 1},
                                                      "cpu": {"quota": -1, "limit": -1},
                                                      "memory": {"quota": -1, "limit": -1}}}})
    try:
        await gang(kube, namespace, name, node_pool, "trio", 3)

        async def running():
            items, _ = await kube.list(PODS, namespace=namespace)
            return sum(1 for p in items if p["spec"].get("nodeName")) == 3

        await eventually(running, timeout_s=90, what="the 3-pod gang to be bound")
        await gang(kube, namespace, name, node_pool, "pair", 2)

        async def over_limit():
            # the verdict is the planner's; the figures are fairshare's, computed at most once a second, so
            # they may lag the verdict by that much: wait until they count the pair's request too
            status, body = await get_json(f"{api_url}/v1/explain/{namespace}/pair")
            ok = status == 200 and "OverLimit" in body["verdict"] and body["queueFigures"]
            gpu = body["queueFigures"]["gpu"] if ok else {}
            return body if ok and gpu["allocated"] == 3 and gpu["request"] == 5 else None

        answer = await eventually(over_limit, timeout_s=90, what="explain to report the limit")
        assert "Limit is 4 GPUs, currently 3 GPUs allocated and workload requested 2 GPUs" in answer["verdict"]
        assert answer["queueFigures"]["gpu"]["limit"] == 4
        assert "fair share 4 GPUs, allocated 3, limit 4 (quota; limit omitted)" in answer["queueLine"]
    finally:
        await kube.delete(QUEUES, name)


async def test_queues_lists_the_test_queue(api_url, kube, queue, node_pool, gpu_nodes):
    await gpu_nodes(1, gpus=2)

    async def listed():
        status, body = await get_json(f"{api_url}/v1/queues?shard={node_pool}")
        return body if status == 200 and queue in body["shards"].get(node_pool, {}).get("queues", {}) else None

    body = await eventually(listed, timeout_s=60, what="the queue in /v1/queues")
    gpu = body["shards"][node_pool]["queues"][queue]["gpu"]
    assert gpu["deserved"] == 2 and gpu["limit"] == -1  # quota -1: the whole shard (2 GPUs); unlimited
    assert set(body["shards"]) == {node_pool}
    status, everything = await get_json(f"{api_url}/v1/queues")
    assert status == 200 and node_pool in everything["shards"]
    async with aiohttp.ClientSession() as http:  # the dashboard: its page and the script that follows the stream
        async with http.get(f"{api_url}/") as resp:
            page = await resp.text()
        assert resp.status == 200 and 'src="static/stream.js"' in page
        async with http.get(f"{api_url}/static/stream.js") as resp:
            assert resp.status == 200 and "EventSource" in await resp.text()

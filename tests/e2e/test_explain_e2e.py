"""`shoal explain` / `shoal queues` on the real stack WITHOUT an api service: they read the apiserver, Redis and
the decision topic directly. A pending gang gets its gang message and queue figures; a pod evicted by reclaim
gets "evicted by reclaim (by …)"; bad input gets one line and exit 1."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from typing import Any

import pytest
from e2e_helpers import eventually

from shoal.adapters.kube import PODGROUPS, PODS, QUEUES
from shoal.cli.main import main
from shoal.devstack.procs import free_port


@pytest.fixture
def cli_env(shoal: Any, stack: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """The environment `shoal` reads, pointed at the stack, and an api URL where nothing listens."""
    for key, value in stack.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SHOAL_TOPIC_PREFIX", shoal.topic_prefix)
    no_api = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("SHOAL_API_URL", no_api)
    return no_api


async def shoal_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()

    def call() -> int:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return main(list(argv))

    code = await asyncio.to_thread(call)
    return code, out.getvalue(), err.getvalue()


def pod(namespace: str, name: str, queue: str, pool: str, gpus: int, group: str | None = None) -> dict:
    meta: dict = {"name": name, "namespace": namespace,
                  "labels": {"kai.scheduler/queue": queue, "kai.scheduler/node-pool": pool}}
    if group:
        meta["annotations"] = {"pod-group-name": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "shoal-scheduler", "terminationGracePeriodSeconds": 0,
                     "priorityClassName": "train",
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


async def test_explain_without_api_reads_the_cluster(cli_env, kube, namespace, queue, node_pool, gpu_nodes):
    await gpu_nodes(2, gpus=2)
    await kube.create(PODGROUPS, {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": "quint", "namespace": namespace, "labels": {"kai.scheduler/node-pool": node_pool}},
        "spec": {"minMember": 5, "queue": queue, "priorityClassName": "train"}}, namespace=namespace)
    for i in range(5):
        await kube.create(PODS, pod(namespace, f"quint-{i}", queue, node_pool, 1, "quint"), namespace=namespace)

    async def pending():
        code, out, err = await shoal_cli("explain", "quint-2", "-n", namespace, "--output", "json")
        answer = json.loads(out) if code == 0 else None
        ok = answer and answer["status"] == "pending" and answer["queueFigures"] and answer["schedulingConditions"]
        return (answer, err) if ok else None

    answer, err = await eventually(pending, timeout_s=90, what="shoal explain to report the pending gang")
    assert "no api service" in err and "reading the apiserver and Redis directly" in err
    assert "Resources were found for 4 pods while 5 are required for gang scheduling" in answer["verdict"]
    assert answer["queueFigures"]["gpu"]["fairShare"] == 4
    assert any(d["type"] == "io.shoal.decision.unschedulable" for d in answer["decisions"])  # from Kafka

    code, out, _ = await shoal_cli("explain", f"{namespace}/quint")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith(f"{namespace}/quint: pending: ")
    assert lines[1].startswith(f"queue {queue}: fair share 4 GPUs, allocated 0, limit unlimited")

    code, out, _ = await shoal_cli("queues", "--shard", node_pool)
    assert code == 0
    header, row = out.splitlines()[:2]
    assert header.split()[:4] == ["SHARD", "QUEUE", "GPU", "DESERVED"]
    assert row.split()[:4] == [node_pool, queue, "4", "4"]  # quota -1: the whole shard; fair share 4 GPUs
    code, out, _ = await shoal_cli("queues", "--shard", node_pool, "-o", "json")
    assert json.loads(out)["shards"][node_pool]["queues"][queue]["gpu"]["request"] == 5


async def test_explain_an_evicted_pod(cli_env, kube, namespace, node_pool, gpu_nodes):
    await gpu_nodes(1, gpus=2)
    lo, hi = f"lo-{node_pool}", f"hi-{node_pool}"
    quotas = {lo: 0, hi: 2}
    for name, quota in quotas.items():
        await kube.create(QUEUES, {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
                                   "spec": {"resources": {"gpu": {"quota": quota, "limit": -1, "overQuotaWeight": 1},
                                                          "cpu": {"quota": -1, "limit": -1},
                                                          "memory": {"quota": -1, "limit": -1}}}})
    try:
        for i in range(2):
            await kube.create(PODS, pod(namespace, f"lo-{i}", lo, node_pool, 1), namespace=namespace)

        async def running():
            items, _ = await kube.list(PODS, namespace=namespace)
            return sum(1 for p in items if (p.get("status") or {}).get("phase") == "Running") == 2

        await eventually(running, timeout_s=90, what="the over-quota pods to run")
        await kube.create(PODS, pod(namespace, "hi-0", hi, node_pool, 2), namespace=namespace)

        async def evicted():
            code, out, _ = await shoal_cli("explain", "lo-0", "-n", namespace, "-o", "json")
            answer = json.loads(out) if out else None
            return answer if answer and answer["status"] == "evicted" else None

        answer = await eventually(evicted, timeout_s=120, what="shoal explain to report the eviction")
        assert answer["verdict"].startswith(f"evicted by reclaim (by {namespace}/"), answer["verdict"]
        assert any(d["type"] == "io.shoal.decision.evicted" for d in answer["decisions"])
    finally:
        for name in quotas:
            await kube.delete(QUEUES, name)


async def test_cli_errors_are_one_line(cli_env, monkeypatch):
    code, out, err = await shoal_cli("explain", "a/b/c")
    assert code == 1 and out == "" and err.strip().count("\n") == 0 and "NAMESPACE/NAME" in err
    for key in ("SHOAL_KUBECONFIG", "KUBECONFIG"):
        monkeypatch.setenv(key, "/nonexistent/kubeconfig")
    monkeypatch.setenv("HOME", "/nonexistent")
    code, out, err = await shoal_cli("explain", "x")
    assert code == 1 and out == "" and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("shoal explain: cannot reach the api service nor the cluster")
    monkeypatch.setenv("SHOAL_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    code, out, err = await shoal_cli("queues")
    assert code == 1 and out == "" and "Traceback" not in err
    assert err.strip().splitlines()[-1] == "shoal queues: cannot reach the api service nor Redis: " \
                                           "ConnectionError: Redis does not answer"

"""The node agent against the real apiserver and Kafka, on fake GPU nodes with the fake GPU backend.

The agent is driven tick by tick (`await app.tick(now)`) so time is explicit; the fake inventory of each
node is the node's hardware, and tests start/stop simulated GPU processes on it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.nodeagent.app import NodeAgentApp
from services.nodeagent.binding import FAKE_DEVICES_ANNOTATION, RESERVE_ANNOTATION
from services.nodeagent.config import NodeAgentSettings
from services.nodeagent.fake_backend import FakeInventory, fake_gpu_uuid
from services.nodeagent.telemetry import decode
from shoal.adapters.kafka import Publisher, ensure_topics
from shoal.messages.topics import GPU_USAGE
from shoal.settings import KafkaSettings

# These tests run their own agent; the end-to-end services' agent (session-scoped, serving every fake node that
# is not labelled shoal.io/isolated) must leave these nodes alone, or their events arrive twice.
ISOLATED = {"shoal.io/isolated": "nodeagent-integration"}


async def eventually(check: Callable[[], Awaitable[Any]], timeout_s: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.1)


@pytest_asyncio.fixture
async def rsv(kube_api: Any, namespace: str) -> Any:
    """This test's reservation namespace (the agent's SHOAL_RESERVATION_NAMESPACE), next to `namespace`."""
    core = client.CoreV1Api(kube_api)
    name = f"{namespace}-rsv"
    await core.create_namespace({"metadata": {"name": name, "labels": {"shoal.io/test": "true"}}})
    try:
        yield name
    finally:
        try:
            await core.delete_namespace(name, _preload_content=False)
        except ApiException:
            pass


def settings(namespace: str, node_pool: str, **extra: Any) -> NodeAgentSettings:
    values: dict[str, Any] = {
        "all_fake_nodes": True,
        "backend": "fake",
        "fake_node_selector": f"kai.scheduler/node-pool={node_pool}",
        "reservation_namespace": namespace,
        "publish_telemetry": False,
        **extra,
    }
    return NodeAgentSettings(**values)


def pod_body(name: str, node: str, *, annotations: dict[str, str] | None = None,
             labels: dict[str, str] | None = None, gpus: int = 0) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox:1.36", "resources": resources}],
        },
    }


async def create_pod(core: client.CoreV1Api, namespace: str, body: dict[str, Any]) -> str:
    pod = await core.create_namespaced_pod(namespace, body)
    return pod.metadata.uid


async def annotation(core: client.CoreV1Api, namespace: str, name: str, key: str) -> str | None:
    pod = await core.read_namespaced_pod(name, namespace)
    return (pod.metadata.annotations or {}).get(key)


async def events_of(core: client.CoreV1Api, namespace: str, name: str) -> list[Any]:
    got = await core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return list(got.items)


async def one_node(gpu_nodes: Any, gpus: int = 2, **kwargs: Any) -> str:
    labels = {**kwargs.pop("labels", {}), **ISOLATED}
    (node,) = await gpu_nodes(count=1, gpus=gpus, gpu_memory_mib=10000, labels=labels, **kwargs)
    return node


async def test_reservations_get_distinct_gpus_and_survive_restart(kube_api: Any, namespace: str, rsv: str,
                                                                  node_pool: str, gpu_nodes: Any) -> None:
    core = client.CoreV1Api(kube_api)
    node = await one_node(gpu_nodes, gpus=3)
    await create_pod(core, namespace, pod_body("train", node, gpus=1))  # a whole-GPU pod holds one GPU too
    for name, group in (("r1", "g1"), ("r2", "g2")):
        await create_pod(core, rsv, pod_body(name, node, labels={"runai-gpu-group": group}))
    app = NodeAgentApp(settings(rsv, node_pool), kube_api)
    await app.tick(0.0)
    r1 = await annotation(core, rsv, "r1", RESERVE_ANNOTATION)
    r2 = await annotation(core, rsv, "r2", RESERVE_ANNOTATION)
    train = await annotation(core, namespace, "train", FAKE_DEVICES_ANNOTATION)
    all_gpus = {fake_gpu_uuid(node, i) for i in range(3)}
    assert {r1, r2, train} == all_gpus  # three different GPUs of this node

    # a new agent process rebuilds its state from the annotations: nothing moves
    await create_pod(core, rsv, pod_body("r3", node, labels={"runai-gpu-group": "g3"}))
    restarted = NodeAgentApp(settings(rsv, node_pool), kube_api)
    await restarted.tick(0.0)
    assert await annotation(core, rsv, "r1", RESERVE_ANNOTATION) == r1
    assert await annotation(core, rsv, "r2", RESERVE_ANNOTATION) == r2
    assert await annotation(core, rsv, "r3", RESERVE_ANNOTATION) is None  # no free GPU: it waits

    await core.delete_namespaced_pod("r1", rsv, grace_period_seconds=0)

    async def r3_assigned() -> str | None:
        await restarted.tick(1.0)
        return await annotation(core, rsv, "r3", RESERVE_ANNOTATION)

    assert await eventually(r3_assigned, what="r3 to get the GPU r1 released") == r1


async def test_with_a_device_directory_whole_gpu_pods_are_recorded_on_the_node_and_survive_restart(
        kube_api: Any, namespace: str, rsv: str, node_pool: str, gpu_nodes: Any, tmp_path: Any) -> None:
    core = client.CoreV1Api(kube_api)
    node = await one_node(gpu_nodes, gpus=2)
    train = await create_pod(core, namespace, pod_body("train", node, gpus=1))
    app = NodeAgentApp(settings(rsv, node_pool, fake_device_dir=str(tmp_path)), kube_api)
    await app.tick(0.0)
    assert await annotation(core, namespace, "train", FAKE_DEVICES_ANNOTATION) is None  # no write to the pod
    held = app.device_record.of(node)[train]
    assert len(held) == 1 and held[0] in {fake_gpu_uuid(node, i) for i in range(2)}

    # a new process finds the record: a reservation pod gets the other GPU, and then none is free
    await create_pod(core, rsv, pod_body("r1", node, labels={"runai-gpu-group": "g1"}))
    second = await create_pod(core, namespace, pod_body("second", node, gpus=1))
    restarted = NodeAgentApp(settings(rsv, node_pool, fake_device_dir=str(tmp_path)), kube_api)
    await restarted.tick(0.0)
    r1 = await annotation(core, rsv, "r1", RESERVE_ANNOTATION)
    assert r1 is not None and r1 != held[0]
    assert restarted.device_record.of(node) == {train: held}  # "second" waits for a GPU

    await core.delete_namespaced_pod("train", namespace, grace_period_seconds=0)

    async def second_assigned() -> dict[str, tuple[str, ...]] | None:
        await restarted.tick(1.0)
        current = dict(restarted.device_record.of(node))
        return current if second in current else None

    assert await eventually(second_assigned, what="second to get the GPU train released") == {second: held}
    assert await annotation(core, namespace, "second", FAKE_DEVICES_ANNOTATION) is None


async def shared_gpu(core: client.CoreV1Api, app: NodeAgentApp, node: str, group: str = "g1"
                     ) -> tuple[str, FakeInventory]:
    """A reservation pod for `group` on `node`, and the GPU the agent gave it."""
    rsv = app.settings.reservation_namespace
    await create_pod(core, rsv, pod_body(f"res-{group}", node, labels={"runai-gpu-group": group}))
    await app.tick(0.0)
    gpu = await annotation(core, rsv, f"res-{group}", RESERVE_ANNOTATION)
    assert gpu is not None
    inv = app.inventories[node]
    assert isinstance(inv, FakeInventory)
    return gpu, inv


async def test_over_share_report_gives_event_and_metrics(kube_api: Any, namespace: str, rsv: str,
                                                         node_pool: str, gpu_nodes: Any) -> None:
    core = client.CoreV1Api(kube_api)
    node = await one_node(gpu_nodes)
    app = NodeAgentApp(settings(rsv, node_pool, memory_policy="report", grace_period_s=0), kube_api)
    gpu, inv = await shared_gpu(core, app, node)
    uid = await create_pod(core, namespace, pod_body("frac", node, annotations={"gpu-fraction": "0.25"},
                                                     labels={"runai-gpu-group": "g1"}))
    inv.start_process(pid=4242, gpu_uuid=gpu, used_mib=4000, start_ticks=77, pod_uid=uid, utilization_percent=50)
    await app.tick(1.0)
    await app.tick(2.0)
    events = await eventually(lambda: events_of(core, namespace, "frac"), what="an over-share event")
    assert [(e.reason, e.type) for e in events] == [("GPUMemoryOverShare", "Warning")]
    assert "4000 MiB" in events[0].message and "2500 MiB" in events[0].message
    assert [p.pid for p in inv.sample().processes] == [4242]  # report only: never killed
    text = app.metrics.render().decode()
    assert f'DCGM_FI_DEV_FB_USED{{Hostname="{node}",UUID="{gpu}"' in text
    assert 'shoal_pod_gpu_memory_over_share_mib{' in text and 'pod="frac"} 1500.0' in text


async def test_enforce_kills_offender_only_after_grace(kube_api: Any, namespace: str, rsv: str,
                                                       node_pool: str, gpu_nodes: Any) -> None:
    core = client.CoreV1Api(kube_api)
    node = await one_node(gpu_nodes)
    app = NodeAgentApp(settings(rsv, node_pool, memory_policy="report",
                                pool_memory_policies=(f"{node_pool}=enforce",), grace_period_s=5), kube_api)
    gpu, inv = await shared_gpu(core, app, node)
    hog = await create_pod(core, namespace, pod_body("hog", node, annotations={"gpu-fraction": "0.25"},
                                                     labels={"runai-gpu-group": "g1"}))
    fine = await create_pod(core, namespace, pod_body("fine", node, annotations={"gpu-fraction": "0.5"},
                                                      labels={"runai-gpu-group": "g1"}))
    inv.start_process(pid=100, gpu_uuid=gpu, used_mib=3500, start_ticks=1, pod_uid=hog)
    inv.start_process(pid=200, gpu_uuid=gpu, used_mib=4900, start_ticks=2, pod_uid=fine)
    await app.tick(10.0)
    assert inv.killed == []  # within the grace period
    await app.tick(16.0)
    assert inv.killed == [(100, 1)]
    assert [p.pid for p in inv.sample().processes] == [200]  # the pod within its share keeps running
    reasons = [e.reason for e in await events_of(core, namespace, "hog")]
    assert sorted(reasons) == ["GPUMemoryLimitExceeded", "GPUMemoryOverShare"]
    assert await events_of(core, namespace, "fine") == []
    assert (await core.read_namespaced_pod("hog", namespace)).metadata.deletion_timestamp is None


async def test_dynamic_fraction_reclaim_kills_borrower_process(kube_api: Any, namespace: str, rsv: str,
                                                               node_pool: str, gpu_nodes: Any) -> None:
    core = client.CoreV1Api(kube_api)
    node = await one_node(gpu_nodes)
    app = NodeAgentApp(settings(rsv, node_pool, memory_policy="enforce", grace_period_s=60), kube_api)
    gpu, inv = await shared_gpu(core, app, node)
    borrower = await create_pod(core, namespace, pod_body(
        "notebook", node, annotations={"gpu-fraction": "0.25", "gpu-fraction-limit": "1.0"},
        labels={"runai-gpu-group": "g1"}))
    owner = await create_pod(core, namespace, pod_body("owner", node, annotations={"gpu-fraction": "0.5"},
                                                       labels={"runai-gpu-group": "g1"}))
    inv.start_process(pid=300, gpu_uuid=gpu, used_mib=7000, start_ticks=3, pod_uid=borrower)
    await app.tick(1.0)
    assert inv.killed == []  # borrowing up to the limit is allowed while nobody needs the memory
    inv.start_process(pid=400, gpu_uuid=gpu, used_mib=1500, start_ticks=4, pod_uid=owner)
    await app.tick(2.0)
    assert inv.killed == [(300, 3)]
    events = await events_of(core, namespace, "notebook")
    assert [e.reason for e in events] == ["GPUMemoryReclaimed"]
    assert f"{namespace}/owner" in events[0].message and "process 300" in events[0].message
    assert (await core.read_namespaced_pod("notebook", namespace)).metadata.deletion_timestamp is None


async def test_mig_refusal_and_mps_configmap(kube_api: Any, namespace: str, rsv: str, node_pool: str,
                                          gpu_nodes: Any) -> None:
    core = client.CoreV1Api(kube_api)
    (mig_node,) = await gpu_nodes(count=1, gpus=1, labels={"nvidia.com/mig.strategy": "mixed", **ISOLATED})
    node = await one_node(gpu_nodes)
    app = NodeAgentApp(settings(rsv, node_pool, mps_mode=True, time_slicing_mode="strict"), kube_api)
    await create_pod(core, rsv, pod_body("res-m", mig_node, labels={"runai-gpu-group": "gm"}))
    await create_pod(core, namespace, pod_body("on-mig", mig_node, annotations={"gpu-fraction": "0.5"},
                                               labels={"runai-gpu-group": "gm"}))
    await shared_gpu(core, app, node)
    await create_pod(core, namespace, pod_body(
        "mps", node, annotations={"gpu-fraction": "0.25", "runai/shared-gpu-configmap": "mps-x1-shared-gpu"},
        labels={"runai-gpu-group": "g1"}))
    await app.tick(1.0)
    assert [e.reason for e in await events_of(core, namespace, "on-mig")] == ["GPUSharingUnsupportedOnMIG"]
    cm = await core.read_namespaced_config_map("mps-x1-shared-gpu-0-evar", namespace)
    assert cm.data == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2500M"}


async def test_gpu_usage_published_on_kafka(kube_api: Any, stack: Any, namespace: str, rsv: str, node_pool: str,
                                            gpu_nodes: Any, topic_prefix: str) -> None:
    core = client.CoreV1Api(kube_api)
    (node,) = await gpu_nodes(count=1, gpus=2, gpu_memory_mib=10000, labels=ISOLATED)
    kafka = KafkaSettings(bootstrap=stack.kafka_bootstrap)
    topic = GPU_USAGE.full(topic_prefix)
    await ensure_topics(kafka, [topic])
    async with Publisher(kafka) as publisher:
        app = NodeAgentApp(settings(rsv, node_pool, topic_prefix=topic_prefix, publish_telemetry=True,
                                    telemetry_period_s=5), kube_api, publisher=publisher)
        gpu, inv = await shared_gpu(core, app, node)
        uid = await create_pod(core, namespace, pod_body("frac", node, annotations={"gpu-fraction": "0.5"},
                                                         labels={"runai-gpu-group": "g1"}))
        assert isinstance(inv, FakeInventory)
        inv.start_process(pid=7, gpu_uuid=gpu, used_mib=1234, start_ticks=1, pod_uid=uid, utilization_percent=42)
        await app.tick(10.0)
        await app.tick(11.0)  # within the period: not published again
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=stack.kafka_bootstrap, auto_offset_reset="earliest",
                                group_id=f"t-{uuid.uuid4().hex[:8]}")
    await consumer.start()
    try:
        batches = await consumer.getmany(timeout_ms=10_000)
        records = [r for rs in batches.values() for r in rs]
    finally:
        await consumer.stop()
    assert len(records) == 2  # tick at 0.0 (first) and 10.0
    assert all(r.key == node.encode() for r in records)
    usage = decode(records[-1].value)
    assert usage.node == node and usage.node_pool == node_pool
    assert sorted(g.uuid for g in usage.gpus) == sorted(fake_gpu_uuid(node, i) for i in range(2))
    (pod,) = usage.pods
    assert (pod.pod, pod.gpu_uuid, pod.memory_used_mib, pod.memory_request_mib, pod.fraction) == (
        "frac", gpu, 1234, 5000, 0.5)
    assert pod.utilization_percent == 42


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_entry_point_serves_fake_nodes(kube_api: Any, stack: Any, namespace: str, rsv: str, node_pool: str,
                                             gpu_nodes: Any, topic_prefix: str) -> None:
    core = client.CoreV1Api(kube_api)
    (node,) = await gpu_nodes(count=1, gpus=1, gpu_memory_mib=10000, labels=ISOLATED)
    await create_pod(core, rsv, pod_body("r1", node, labels={"runai-gpu-group": "g1"}))
    # a fraction pod whose simulated GPU process (fake backend) uses more than its 2500 MiB share
    await create_pod(core, namespace, pod_body(
        "hungry", node, annotations={"gpu-fraction": "0.25", "shoal.io/simulated-gpu-memory-mib": "4000"},
        labels={"runai-gpu-group": "g1"}))
    port = free_port()
    env = {
        **os.environ,
        "SHOAL_ALL_FAKE_NODES": "true",
        "SHOAL_BACKEND": "fake",
        "SHOAL_FAKE_NODE_SELECTOR": f"kai.scheduler/node-pool={node_pool}",
        "SHOAL_RESERVATION_NAMESPACE": rsv,
        "SHOAL_KUBECONFIG": stack.kubeconfig,
        "SHOAL_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "SHOAL_TOPIC_PREFIX": topic_prefix,
        "SHOAL_HTTP_PORT": str(port),
        "SHOAL_SAMPLE_PERIOD_S": "0.5",
    }
    proc = subprocess.Popen([sys.executable, "-m", "services.nodeagent"], env=env, stderr=subprocess.PIPE)
    try:
        assert await eventually(lambda: annotation(core, rsv, "r1", RESERVE_ANNOTATION), timeout_s=30,
                                what="the agent process to annotate r1") == fake_gpu_uuid(node, 0)
        async with aiohttp.ClientSession() as http:
            async def get(path: str) -> tuple[int, str]:
                async with http.get(f"http://127.0.0.1:{port}{path}") as resp:
                    return resp.status, await resp.text()

            assert (await get("/healthz"))[0] == 200
            async def ready() -> bool:
                return (await get("/readyz"))[0] == 200

            await eventually(ready, what="/readyz")
            status, text = await get("/metrics")
            assert status == 200 and f'DCGM_FI_DEV_FB_TOTAL{{Hostname="{node}"' in text

            async def over_share_event() -> list[str]:
                return [e.reason for e in await events_of(core, namespace, "hungry")]

            assert await eventually(over_share_event, timeout_s=30, what="an over-share event from the process") == [
                "GPUMemoryOverShare"]
            status, text = await get("/metrics")
            assert 'pod="hungry"} 1500.0' in text  # shoal_pod_gpu_memory_over_share_mib
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = await asyncio.to_thread(proc.communicate, timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, err.decode()[-2000:]

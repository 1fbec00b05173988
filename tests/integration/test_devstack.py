"""The local stack works: apiserver + RBAC, controller-manager, fake nodes and fake kubelet, Kafka, Redis."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from shoal.devstack import StackInfo, status
from shoal.devstack.fakekubelet import RUN_SECONDS

UNSERVED_SCHEDULER = "no-such-scheduler"  # nothing binds these pods but the test itself


async def eventually(
    check: Callable[[], Awaitable[Any]], timeout_s: float = 30.0, what: str = "condition"
) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.1)


def pod_body(name: str, annotations: dict[str, str] | None = None, grace_s: int = 30) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "schedulerName": UNSERVED_SCHEDULER,
            "terminationGracePeriodSeconds": grace_s,
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "busybox:1.36", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }


async def bind(core: client.CoreV1Api, namespace: str, pod: str, node: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    # the server answers with a Status the client cannot turn into a V1Binding: do not parse it
    await core.create_namespaced_binding(namespace, body, _preload_content=False)


async def pod_phase(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    try:
        pod = await core.read_namespaced_pod(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return pod.status.phase


async def test_apiserver_answers_and_rbac_is_enforced(kube_api: Any, namespace: str) -> None:
    version = await client.VersionApi(kube_api).get_code()
    assert version.git_version.startswith("v1.36")
    authz = client.AuthorizationV1Api(kube_api)

    async def allowed(user: str) -> bool:
        review = await authz.create_subject_access_review(
            {
                "spec": {
                    "user": user,
                    "resourceAttributes": {"namespace": namespace, "verb": "list", "resource": "pods"},
                }
            }
        )
        return bool(review.status.allowed)

    assert not await allowed("alice"), "RBAC allowed an unknown user before any binding"
    rbac = client.RbacAuthorizationV1Api(kube_api)
    await rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
    )
    await rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "alice-reads-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
        },
    )
    await eventually(lambda: allowed("alice"), 10, "the role binding to take effect")


async def test_the_kubeconfig_authenticates_the_admin_by_token(kube_api: Any, stack: Any) -> None:
    """The kubeconfig's user is the admin by bearer token (a lookup for the apiserver, where a client certificate
    costs a signature check on every request); the admin certificate still answers the stack's readiness probes."""
    review = await client.AuthenticationV1Api(kube_api).create_self_subject_review({})
    user = review.status.user_info
    assert user.username == "admin" and "system:masters" in user.groups
    text = Path(stack.kubeconfig).read_text()
    assert "token: " in text and "client-certificate" not in text


async def test_fake_gpu_nodes_keep_capacity_labels_and_ready(
    kube_api: Any, gpu_nodes: Any, node_pool: str
) -> None:
    names = await gpu_nodes(2, gpus=4, gpu_memory_mib=24576, cpu="16", memory="128Gi")
    core = client.CoreV1Api(kube_api)
    for name in names:
        node = await core.read_node(name)
        assert node.status.capacity["nvidia.com/gpu"] == "4"
        assert node.status.allocatable["nvidia.com/gpu"] == "4"
        assert node.status.allocatable["cpu"] == "16"
        assert node.metadata.labels["kai.scheduler/node-pool"] == node_pool
        assert node.metadata.labels["nvidia.com/gpu.memory"] == "24576"
        assert node.metadata.labels["nvidia.com/gpu.count"] == "4"
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True"
    pool_nodes = await core.list_node(label_selector=f"kai.scheduler/node-pool={node_pool}")
    assert sorted(n.metadata.name for n in pool_nodes.items) == sorted(names)


async def test_job_creates_pods_which_run_and_complete(kube_api: Any, namespace: str, gpu_nodes: Any) -> None:
    [node] = await gpu_nodes(1)
    core, batch = client.CoreV1Api(kube_api), client.BatchV1Api(kube_api)
    template = pod_body("unused", annotations={RUN_SECONDS: "1"})
    del template["metadata"]["name"]
    await batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "work"},
            "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0, "template": template},
        },
    )

    async def job_pods() -> list[str]:
        pods = await core.list_namespaced_pod(namespace, label_selector="job-name=work")
        return sorted(p.metadata.name for p in pods.items) if len(pods.items) == 2 else []

    pods = await eventually(job_pods, 30, "the job controller to create 2 pods")
    for pod in pods:
        await bind(core, namespace, pod, node)

    async def succeeded() -> bool:
        job = await batch.read_namespaced_job_status("work", namespace)
        return (job.status.succeeded or 0) == 2

    await eventually(succeeded, 30, "the job to count 2 succeeded pods")


async def test_bound_pod_runs_on_a_fake_node(kube_api: Any, namespace: str, gpu_nodes: Any) -> None:
    [node] = await gpu_nodes(1)
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(namespace, pod_body("p"))
    await asyncio.sleep(0.5)
    assert await pod_phase(core, namespace, "p") == "Pending", "an unbound pod must stay Pending"
    await bind(core, namespace, "p", node)
    await eventually(lambda: _is(core, namespace, "p", "Running"), 30, "the bound pod to run")
    pod = await core.read_namespaced_pod("p", namespace)
    assert pod.spec.node_name == node
    conditions = {c.type: c.status for c in pod.status.conditions}
    assert conditions["Ready"] == "True" and conditions["PodScheduled"] == "True"
    assert pod.status.pod_ip and pod.status.start_time
    assert pod.status.container_statuses[0].state.running is not None


async def _is(core: client.CoreV1Api, namespace: str, name: str, phase: str) -> bool:
    return await pod_phase(core, namespace, name) == phase


async def test_run_seconds_annotation_completes_the_pod(
    kube_api: Any, namespace: str, gpu_nodes: Any
) -> None:
    [node] = await gpu_nodes(1)
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(namespace, pod_body("short", annotations={RUN_SECONDS: "1"}))
    await core.create_namespaced_pod(
        namespace, pod_body("fails", annotations={RUN_SECONDS: "1", "shoal.io/exit-code": "3"})
    )
    await bind(core, namespace, "short", node)
    await bind(core, namespace, "fails", node)
    await eventually(lambda: _is(core, namespace, "short", "Succeeded"), 30, "the pod to succeed")
    await eventually(lambda: _is(core, namespace, "fails", "Failed"), 30, "the pod to fail")
    pod = await core.read_namespaced_pod("short", namespace)
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    started = pod.status.start_time
    finished = pod.status.container_statuses[0].state.terminated.finished_at
    assert (finished - started).total_seconds() >= 1
    failed = await core.read_namespaced_pod("fails", namespace)
    assert failed.status.container_statuses[0].state.terminated.exit_code == 3


async def test_graceful_delete_of_a_running_pod_completes(
    kube_api: Any, namespace: str, gpu_nodes: Any
) -> None:
    [node] = await gpu_nodes(1)
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(namespace, pod_body("victim", grace_s=30))
    await bind(core, namespace, "victim", node)
    await eventually(lambda: _is(core, namespace, "victim", "Running"), 30, "the pod to run")
    began = time.monotonic()
    await core.delete_namespaced_pod("victim", namespace)
    pod = await core.read_namespaced_pod("victim", namespace)
    assert pod.metadata.deletion_timestamp is not None, "a bound pod's delete must be graceful"

    async def gone() -> bool:
        return await pod_phase(core, namespace, "victim") is None

    await eventually(gone, 25, "the graceful delete to finish")
    assert time.monotonic() - began < 20, "the delete waited for the 30 s grace period"


async def test_fake_kubelet_keeps_up_with_hundreds_of_pods(
    kube_api: Any, namespace: str, gpu_nodes: Any
) -> None:
    count = 200
    nodes = await gpu_nodes(4, pods=110)
    core = client.CoreV1Api(kube_api)
    sem = asyncio.Semaphore(32)

    async def create_and_bind(i: int) -> None:
        async with sem:
            body = pod_body(f"many-{i}")
            body["spec"]["containers"][0]["resources"] = {}
            await core.create_namespaced_pod(namespace, body, _preload_content=False)
            await bind(core, namespace, f"many-{i}", nodes[i % len(nodes)])

    began = time.monotonic()
    await asyncio.gather(*(create_and_bind(i) for i in range(count)))
    bound_s = time.monotonic() - began

    async def all_running() -> bool:
        pods = await core.list_namespaced_pod(namespace)
        return sum(p.status.phase == "Running" for p in pods.items) == count

    await eventually(all_running, 60, f"{count} pods to run")
    lag_s = time.monotonic() - began - bound_s
    print(f"{count} pods: created+bound in {bound_s:.1f}s, all Running {lag_s:.1f}s later")
    assert lag_s < 30


async def test_kafka_round_trip(stack: Any, topic_prefix: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = f"{topic_prefix}devstack"
    producer = AIOKafkaProducer(bootstrap_servers=stack.kafka_bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"hello", key=b"k")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=stack.kafka_bootstrap,
        group_id=f"{topic_prefix}g",
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    await consumer.start()
    try:
        message = await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()
    assert (message.key, message.value) == (b"k", b"hello")


async def test_redis_set_get(stack: Any, topic_prefix: str) -> None:
    import redis.asyncio as redis

    conn = redis.Redis.from_url(stack.redis_url)
    try:
        key = f"shoal:test:{topic_prefix}"
        await conn.set(key, b"\x00\x01msgpack")
        assert await conn.get(key) == b"\x00\x01msgpack"
    finally:
        await conn.aclose()


def test_stack_info_is_saved_and_every_process_is_alive(stack: Any) -> None:
    if not stack.state_dir:
        pytest.fail("attached stack without SHOAL_DEV_STATE_DIR: cannot check its processes")
    saved = StackInfo.load(stack.state_dir)
    assert saved.kubeconfig == stack.kubeconfig and saved.redis_url == stack.redis_url
    rows = {row["name"]: row for row in status(Path(stack.state_dir))}
    core = {"etcd", "kube-apiserver", "kube-controller-manager", "fakekubelet", "kafka", "redis"}
    assert core <= set(rows)
    assert all(rows[name]["alive"] and rows[name]["ready"] for name in core), rows


def _shoal(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shoal.cli.main", *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_dev_status_without_a_stack_is_one_clear_line(tmp_path: Path) -> None:
    done = _shoal("dev", "status", "--state-dir", str(tmp_path / "none"))
    assert done.returncode == 1
    assert "no stack in" in done.stdout and "Traceback" not in done.stderr


def test_dev_up_without_redis_names_the_fix(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path), "SHOAL_APT": "0"}  # no redis-server, openssl or java; no apt
    done = _shoal("dev", "up", "--state-dir", str(tmp_path / "state"), env=env)
    assert done.returncode == 2  # a missing host tool is a usage problem: exit 2 with the fix
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "not found on PATH" in lines[0] and "apt-get install" in lines[0]


def test_a_busy_port_is_reported_as_such(tmp_path: Path) -> None:
    import socket

    from shoal.devstack import DevStackError, start_process, stop_process
    from shoal.devstack.components import redis

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(DevStackError, match="port already in use") as failure:
            start_process(tmp_path, redis(tmp_path, port), tie_to_parent=True)
    stop_process(tmp_path, "redis")
    assert "\n" not in str(failure.value)


def test_dev_up_refuses_to_wipe_a_directory_that_holds_no_stack(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    done = _shoal("dev", "up", "--state-dir", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and "holds no stack" in done.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep me"
    done = _shoal("dev", "down", "--state-dir", str(tmp_path))
    assert done.returncode == 0 and (tmp_path / "precious.txt").exists()


async def test_fake_kubelet_catches_up_after_a_restart(
    kube_api: Any, namespace: str, gpu_nodes: Any, stack: Any, tmp_path: Path
) -> None:
    """A private fake kubelet (own node selector) lists what it missed while it was down."""
    from shoal.devstack import components, start_process, stop_process
    from shoal.devstack.nodes import FAKE_NODE_LABEL

    private = f"private-{namespace}"
    [node] = await gpu_nodes(1, labels={FAKE_NODE_LABEL: private})
    core = client.CoreV1Api(kube_api)
    spec = components.fake_kubelet(tmp_path, Path(stack.kubeconfig), 1.0)
    spec.argv = [*spec.argv, "--node-selector", f"{FAKE_NODE_LABEL}={private}"]

    await core.create_namespaced_pod(namespace, pod_body("before"))
    await bind(core, namespace, "before", node)
    await asyncio.sleep(1.0)
    assert await pod_phase(core, namespace, "before") == "Pending", (
        "the stack's kubelet must ignore this node"
    )
    start_process(tmp_path, spec, tie_to_parent=True)
    try:
        await eventually(
            lambda: _is(core, namespace, "before", "Running"), 30, "the first list to run the pod"
        )
        stop_process(tmp_path, "fakekubelet")
        await core.create_namespaced_pod(namespace, pod_body("during", annotations={RUN_SECONDS: "1"}))
        await bind(core, namespace, "during", node)
        await asyncio.sleep(1.0)
        assert await pod_phase(core, namespace, "during") == "Pending"
        start_process(tmp_path, spec, tie_to_parent=True)
        await eventually(
            lambda: _is(core, namespace, "during", "Succeeded"), 30, "the restarted kubelet to catch up"
        )
    finally:
        stop_process(tmp_path, "fakekubelet")


async def test_graceful_delete_finishes_after_the_node_was_deleted(
    kube_api: Any, namespace: str, gpu_nodes: Any
) -> None:
    """Tests delete their nodes before their namespace: the namespace's pods must still go away."""
    from shoal.devstack.nodes import delete_nodes

    [node] = await gpu_nodes(1)
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(namespace, pod_body("orphan", grace_s=30))
    await bind(core, namespace, "orphan", node)
    await eventually(lambda: _is(core, namespace, "orphan", "Running"), 30, "the pod to run")
    await delete_nodes(kube_api, [node])
    await asyncio.sleep(0.5)
    await core.delete_namespaced_pod("orphan", namespace)

    async def gone() -> bool:
        return await pod_phase(core, namespace, "orphan") is None

    await eventually(gone, 30, "the delete of a pod whose node is gone to finish")

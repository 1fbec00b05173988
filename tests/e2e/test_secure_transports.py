"""Shoal's services over encrypted, authenticated transports: Kafka on SASL_SSL (SCRAM-SHA-512) and Redis on
TLS with ACL users, both started by the test (`shoal.devstack.secure`), each requiring what it offers.

A burst (gangs, whole-GPU pods and fractions) is scheduled through snapshotter, fairshare, planner, binder,
node agent and api connected only through them; a service given a wrong password exits at once, non-zero,
with one line naming the dependency, never a traceback or a hang.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import eventually

from shoal.adapters.kube import PODGROUPS, PODS, QUEUES
from shoal.devstack.procs import launch, stop_process, wait_ready
from shoal.devstack.scheduler import REPO, service_spec
from shoal.devstack.secure import SecureTransports, start_secure, stop_secure

SERVICES = ("snapshotter", "fairshare", "planner", "binder", "nodeagent", "api")
NODES, GPUS = 3, 8


@pytest.fixture(scope="module")
def secure() -> Iterator[tuple[SecureTransports, Path]]:
    state = Path(tempfile.mkdtemp(prefix="shoal-secure-"))
    transports = start_secure(state, tie_to_parent=True)
    try:
        yield transports, state
    finally:
        stop_secure(state)


def _env(stack, transports: SecureTransports, prefix: str, **extra: str) -> dict[str, str]:
    return {**stack.env(), **transports.env(), "SHOAL_TOPIC_PREFIX": f"s{uuid.uuid4().hex[:6]}.",
            "SHOAL_SHARD_PREFIX": prefix, "SHOAL_FAKE_NODE_SELECTOR": "shoal.io/isolated=" + prefix,
            "SHOAL_KAFKA_SESSION_TIMEOUT_MS": "6000", "SHOAL_KAFKA_HEARTBEAT_INTERVAL_MS": "500", **extra}


def _pod(namespace: str, name: str, group: str, queue: str, pool: str, *, fraction: bool) -> dict:
    meta = {"name": name, "namespace": namespace, "annotations": {"pod-group-name": group},
            "labels": {"kai.scheduler/queue": queue, "kai.scheduler/node-pool": pool}}
    container: dict = {"name": "main", "image": "busybox"}
    if fraction:
        meta["annotations"]["gpu-fraction"] = "0.5"
    else:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "shoal-scheduler", "terminationGracePeriodSeconds": 0, "containers": [container]}}


def _group(namespace: str, name: str, queue: str, pool: str, min_member: int) -> dict:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "labels": {"kai.scheduler/node-pool": pool}},
            "spec": {"minMember": min_member, "queue": queue, "priorityClassName": "train"}}


@pytest.mark.timeout(600)
async def test_a_burst_is_scheduled_through_sasl_ssl_kafka_and_tls_acl_redis(stack, shoal, kube, namespace, gpu_nodes,
                                                                           secure) -> None:
    transports, _ = secure
    prefix = f"sec{uuid.uuid4().hex[:6]}"
    names = await gpu_nodes(NODES, gpus=GPUS, pool=prefix, labels={"shoal.io/isolated": prefix})
    queue = f"q-{prefix}"
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    await kube.create(QUEUES, {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": queue},
                               "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}})
    state = Path(tempfile.mkdtemp(prefix="shoal-secure-services-"))
    env = _env(stack, transports, prefix)
    specs = [service_spec(name, env) for name in SERVICES]
    try:
        pids = {spec.name: launch(state, spec, tie_to_parent=True) for spec in specs}
        for spec in specs:
            wait_ready(state, spec, pids[spec.name])
        groups = [_group(namespace, f"gang-{g}", queue, prefix, 3) for g in range(2)]
        pods = [_pod(namespace, f"gang-{g}-{i}", f"gang-{g}", queue, prefix, fraction=False)
                for g in range(2) for i in range(3)]
        for s in range(4):
            groups.append(_group(namespace, f"single-{s}", queue, prefix, 1))
            pods.append(_pod(namespace, f"single-{s}", f"single-{s}", queue, prefix, fraction=False))
        for h in range(4):
            groups.append(_group(namespace, f"half-{h}", queue, prefix, 1))
            pods.append(_pod(namespace, f"half-{h}", f"half-{h}", queue, prefix, fraction=True))
        for doc in groups:
            await kube.create(PODGROUPS, doc, namespace=namespace)
        await asyncio.gather(*(kube.create(PODS, doc, namespace=namespace) for doc in pods))

        async def all_bound() -> list | None:
            items, _ = await kube.list(PODS, namespace=namespace)
            bound = [p for p in items if (p.get("spec") or {}).get("nodeName")]
            return bound if len(bound) == len(pods) else None

        bound = await eventually(all_bound, timeout_s=240, what=f"all {len(pods)} pods bound over SASL_SSL/TLS")
        assert {p["spec"]["nodeName"] for p in bound} <= set(names)
    finally:
        for spec in specs:
            stop_process(state, spec.name)
        await kube.delete(QUEUES, queue)


@pytest.mark.parametrize("service", ["planner", "api"])
def test_a_wrong_password_is_one_line_and_a_non_zero_exit(stack, secure, service: str) -> None:
    transports, _ = secure
    env = {**_env(stack, transports, "secbad"), **transports.env(password="not-the-password"),
           "SHOAL_START_TIMEOUT_S": "300", "PYTHONUNBUFFERED": "1"}
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", f"services.{service}"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=400, check=False)
    took = time.monotonic() - began
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    assert ("Kafka" in lines[0] or "Redis" in lines[0]) and ("auth" in lines[0].lower() or "password" in
                                                            lines[0].lower() or "credential" in lines[0].lower())
    assert "not-the-password" not in done.stderr + done.stdout  # the secret is never printed
    # the start-up wait is 300 s: a rejected password ends it at once instead (well under, even on a busy machine)
    assert took < 200, f"a rejected password must end the wait at once, took {took:.0f}s"

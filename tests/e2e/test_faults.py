"""Fault tolerance: kill -9 each service in turn during a burst of 200 pods (gangs, whole-GPU pods and
fractions mixed), and flush Redis mid-burst. Afterwards: no node resource is over-committed, no gang is
partly bound, no shared GPU has two reservation pods, and every pending pod's group has a current reason.

The test runs its own set of services (own topic prefix, node pool prefix and fake-node selector) so it can
kill them without disturbing the session's services. Recovery times are printed (`-s` shows them).
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from e2e_helpers import eventually

from shoal.adapters.kube import PODGROUPS, PODS
from shoal.devstack.procs import launch, stop_process, wait_ready
from shoal.devstack.scheduler import install_base, service_spec

NODES, GPUS = 12, 8
GANGS, GANG_SIZE, SINGLES, HALVES = 15, 4, 40, 100  # 60 + 40 + 100 = 200 pods; demand 150 GPUs > 96
RESERVATION_NS = "kai-resource-reservation"
# the scheduling path; admission webhooks are cluster-wide and stay with the session's services
SERVICES = ("snapshotter", "fairshare", "planner", "binder", "nodeagent")


def pod(namespace, name, group, queue, pool, *, fraction=False):
    meta = {"name": name, "namespace": namespace, "annotations": {"pod-group-name": group},
            "labels": {"kai.scheduler/queue": queue, "kai.scheduler/node-pool": pool}}
    container = {"name": "main", "image": "busybox"}
    if fraction:
        meta["annotations"]["gpu-fraction"] = "0.5"
    else:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "shoal-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [container]}}


def podgroup(namespace, name, queue, pool, min_member):
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "labels": {"kai.scheduler/node-pool": pool}},
            "spec": {"minMember": min_member, "queue": queue, "priorityClassName": "train"}}


def workload(namespace, queue, pool):
    groups, pods = [], []
    for g in range(GANGS):
        groups.append(podgroup(namespace, f"gang-{g}", queue, pool, GANG_SIZE))
        pods += [pod(namespace, f"gang-{g}-{i}", f"gang-{g}", queue, pool) for i in range(GANG_SIZE)]
    for s in range(SINGLES):
        groups.append(podgroup(namespace, f"single-{s}", queue, pool, 1))
        pods.append(pod(namespace, f"single-{s}", f"single-{s}", queue, pool))
    for h in range(HALVES):
        groups.append(podgroup(namespace, f"half-{h}", queue, pool, 1))
        pods.append(pod(namespace, f"half-{h}", f"half-{h}", queue, pool, fraction=True))
    return groups, pods


class OwnServices:
    def __init__(self, stack, prefix: str) -> None:
        self.state = Path(tempfile.mkdtemp(prefix="shoal-faults-"))
        self.env = {**stack.env(), "SHOAL_TOPIC_PREFIX": f"f{uuid.uuid4().hex[:6]}.", "SHOAL_SHARD_PREFIX": prefix,
                    "SHOAL_FAKE_NODE_SELECTOR": "shoal.io/isolated=" + prefix,
                    "SHOAL_KAFKA_SESSION_TIMEOUT_MS": "6000", "SHOAL_KAFKA_HEARTBEAT_INTERVAL_MS": "500",
                    "SHOAL_RESERVATION_SYNC_S": "2", "SHOAL_INFLIGHT_TTL_S": "30"}
        self.specs = {name: service_spec(name, self.env) for name in SERVICES}
        self.pids: dict[str, int] = {}

    def start(self, name: str) -> float:
        began = time.monotonic()
        spec = self.specs[name]
        self.pids[name] = launch(self.state, spec, tie_to_parent=True)
        wait_ready(self.state, spec, self.pids[name])
        return time.monotonic() - began

    def kill(self, name: str) -> None:
        os.kill(self.pids[name], signal.SIGKILL)
        for _ in range(50):
            if not Path(f"/proc/{self.pids[name]}").exists():
                break
            try:
                os.waitpid(self.pids[name], os.WNOHANG)
            except ChildProcessError:
                break
            time.sleep(0.05)

    def stop(self) -> None:
        for name in self.pids:
            stop_process(self.state, self.specs[name].name)


async def create_many(kube, kind, docs, namespace, parallel=16):
    sem = asyncio.Semaphore(parallel)

    async def one(doc):
        async with sem:
            await kube.create(kind, doc, namespace=namespace)

    await asyncio.gather(*(one(d) for d in docs))


@pytest.mark.timeout(900)
async def test_kill_each_service_during_a_burst(stack, kube, kube_api, namespace, gpu_nodes):
    from shoal.adapters.kube import QUEUES

    await install_base(stack.kubeconfig)  # the CRDs: run alone, no other test has installed them
    prefix = f"fault{uuid.uuid4().hex[:6]}"
    pool = prefix
    names = await gpu_nodes(NODES, gpus=GPUS, pool=pool, labels={"shoal.io/isolated": prefix})
    queue = f"q-{prefix}"
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    await kube.create(QUEUES, {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": queue},
                               "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}})
    services = OwnServices(stack, prefix)
    recovery: dict[str, float] = {}
    try:
        for name in SERVICES:
            services.start(name)
        groups, pods = workload(namespace, queue, pool)
        await create_many(kube, PODGROUPS, groups, namespace)
        burst_started = time.monotonic()
        creating = asyncio.create_task(create_many(kube, PODS, pods, namespace, parallel=8))
        for name in ("planner", "binder", "snapshotter", "fairshare", "nodeagent"):
            await asyncio.sleep(1.5)
            services.kill(name)
            await asyncio.sleep(0.5)
            recovery[name] = await asyncio.to_thread(services.start, name)
        red = aioredis.from_url(stack.redis_url)
        await red.flushall()  # every snapshot, fair share, in-flight lease and de-duplication mark is gone
        await red.aclose()
        await creating

        async def settled():
            return await quiescent(kube, namespace)

        await eventually(settled, timeout_s=240, interval_s=3, what="the burst to settle")
        settle_s = time.monotonic() - burst_started
        await check_invariants(kube, namespace, names)
        print(f"\nfault test: service restart-to-ready seconds {recovery}; burst settled in {settle_s:.1f}s")
    finally:
        services.stop()
        await kube.delete(QUEUES, queue)


_last_state: dict = {}


async def quiescent(kube, namespace) -> bool:
    """Stable for two polls: the same pods bound, every pending pod's group carries a condition."""
    items, _ = await kube.list(PODS, namespace=namespace)
    groups, _ = await kube.list(PODGROUPS, namespace=namespace)
    conditioned = {g["metadata"]["name"] for g in groups if (g.get("status") or {}).get("schedulingConditions")}
    bound = frozenset(p["metadata"]["name"] for p in items if p["spec"].get("nodeName"))
    pending_groups = {p["metadata"]["annotations"]["pod-group-name"] for p in items if not p["spec"].get("nodeName")}
    done = len(items) == GANGS * GANG_SIZE + SINGLES + HALVES and pending_groups <= conditioned
    state = (bound, done)
    stable = done and _last_state.get(namespace) == state
    _last_state[namespace] = state
    return stable


async def check_invariants(kube, namespace, nodes):
    items, _ = await kube.list(PODS, namespace=namespace)
    reservations, _ = await kube.list(PODS, namespace=RESERVATION_NS)
    reservations = [r for r in reservations if r["spec"].get("nodeName") in set(nodes)
                    and not r["metadata"].get("deletionTimestamp")]
    # one reservation pod per shared GPU group
    per_group = Counter(r["metadata"]["labels"]["runai-gpu-group"] for r in reservations)
    assert all(n == 1 for n in per_group.values()), f"groups with two reservation pods: {per_group}"
    # no node over-committed: whole-GPU pods + reservation pods <= GPUs; at most 2 halves per shared group
    whole = Counter(p["spec"]["nodeName"] for p in items
                    if p["spec"].get("nodeName") and "gpu-fraction" not in p["metadata"]["annotations"])
    held = Counter(r["spec"]["nodeName"] for r in reservations)
    for node in nodes:
        assert whole[node] + held[node] <= GPUS, f"{node}: {whole[node]} whole + {held[node]} shared > {GPUS}"
    halves_per_group = Counter(p["metadata"]["labels"].get("runai-gpu-group") for p in items
                               if p["spec"].get("nodeName") and "gpu-fraction" in p["metadata"]["annotations"])
    assert None not in halves_per_group, "a bound fractional pod without its runai-gpu-group"
    assert all(n <= 2 for n in halves_per_group.values()), f"a shared GPU over-committed: {halves_per_group}"
    assert set(halves_per_group) <= set(per_group), "a bound fractional pod whose group has no reservation pod"
    # gangs: all or nothing
    bound_by_group = defaultdict(int)
    for p in items:
        if p["spec"].get("nodeName"):
            bound_by_group[p["metadata"]["annotations"]["pod-group-name"]] += 1
    for g in range(GANGS):
        assert bound_by_group[f"gang-{g}"] in (0, GANG_SIZE), f"gang-{g} partly bound: {bound_by_group[f'gang-{g}']}"
    # the cluster was used: most GPUs hold work
    assert sum(whole.values()) + sum(held.values()) >= NODES * GPUS - GANG_SIZE

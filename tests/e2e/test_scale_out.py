"""Scale-out: two shards (node pools) with a planner each and two binder replicas sharing the plan topic's
partitions. Both shards' gangs are bound whole, nothing is double-booked, and both planners did work."""

from __future__ import annotations

import tempfile
import uuid
from collections import Counter
from pathlib import Path

import pytest
from e2e_helpers import eventually

from shoal.adapters.kube import PODGROUPS, PODS, QUEUES
from shoal.devstack.procs import launch, stop_process, wait_ready
from shoal.devstack.scheduler import install_base, service_spec


def gang(namespace, name, queue, pool, size):
    pg = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
          "metadata": {"name": name, "namespace": namespace, "labels": {"kai.scheduler/node-pool": pool}},
          "spec": {"minMember": size, "queue": queue, "priorityClassName": "train"}}
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{name}-{i}", "namespace": namespace, "annotations": {"pod-group-name": name},
                          "labels": {"kai.scheduler/queue": queue, "kai.scheduler/node-pool": pool}},
             "spec": {"schedulerName": "shoal-scheduler", "terminationGracePeriodSeconds": 0,
                      "containers": [{"name": "c", "image": "busybox",
                                      "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}} for i in range(size)]
    return pg, pods


@pytest.mark.timeout(600)
async def test_two_shards_two_planners_two_binders(stack, kube, namespace, gpu_nodes):
    await install_base(stack.kubeconfig)  # the CRDs: run alone, no earlier test installed them
    tag = f"scale{uuid.uuid4().hex[:6]}"
    pools = [f"{tag}-a", f"{tag}-b"]
    nodes = {}
    for pool in pools:
        nodes[pool] = await gpu_nodes(2, gpus=4, pool=pool, labels={"shoal.io/isolated": tag})
    queue = f"q-{tag}"
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    await kube.create(QUEUES, {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": queue},
                               "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}})
    state = Path(tempfile.mkdtemp(prefix="shoal-scale-"))
    env = {**stack.env(), "SHOAL_TOPIC_PREFIX": f"s{uuid.uuid4().hex[:6]}.", "SHOAL_SHARD_PREFIX": tag,
           "SHOAL_FAKE_NODE_SELECTOR": f"shoal.io/isolated={tag}",
           "SHOAL_KAFKA_SESSION_TIMEOUT_MS": "6000", "SHOAL_KAFKA_HEARTBEAT_INTERVAL_MS": "500"}
    specs = [service_spec("snapshotter", env), service_spec("fairshare", env)]
    for i, pool in enumerate(pools):
        # the first pool's planner caps its cycles at 3 binds: its backlog of 3 gangs of 2, there before the
        # services start, is planned in two cycles from one snapshot (2 gangs, then the third)
        cap = {"SHOAL_BIND_CAP": "3"} if i == 0 else {}
        spec = service_spec("planner", {**env, "SHOAL_SHARDS": pool, "SHOAL_GROUP_ID": f"planner-{pool}", **cap})
        spec.name = f"shoal-planner-{i}"
        specs.append(spec)
    for i in range(2):
        spec = service_spec("binder", env)
        spec.name = f"shoal-binder-{i}"
        specs.append(spec)
    pids = {}

    async def gangs(pool: str) -> None:
        for g in range(3):
            pg, pods = gang(namespace, f"{pool}-g{g}", queue, pool, 2)
            await kube.create(PODGROUPS, pg, namespace=namespace)
            for p in pods:
                await kube.create(PODS, p, namespace=namespace)

    try:
        await gangs(pools[0])  # a backlog: there before the scheduler
        for spec in specs:
            pids[spec.name] = launch(state, spec, tie_to_parent=True)
        for spec in specs:
            wait_ready(state, spec, pids[spec.name])
        await gangs(pools[1])

        async def all_bound():
            items, _ = await kube.list(PODS, namespace=namespace)
            return items if len(items) == 12 and all(p["spec"].get("nodeName") for p in items) else None

        items = await eventually(all_bound, timeout_s=120, what="both shards' gangs to be bound")
        per_node = Counter(p["spec"]["nodeName"] for p in items)
        assert all(n <= 4 for n in per_node.values()), per_node
        for p in items:
            pool = p["metadata"]["labels"]["kai.scheduler/node-pool"]
            assert p["spec"]["nodeName"] in nodes[pool], "a pod left its node pool"
        for i, pool in enumerate(pools):
            log = (state / "logs" / f"shoal-planner-{i}.log").read_text()
            assert f'"shard":"{pool}"' in log and '"binds":' in log, f"planner {i} planned no work for {pool}"
            other = pools[1 - i]
            assert f'"plan_published","logger":"services.planner","service":"planner","shard":"{other}"' not in log
        first = (state / "logs" / "shoal-planner-0.log").read_text()
        assert '"capped":true' in first, "the first pool's backlog never reached its planner's bind cap"
    finally:
        for name in pids:
            stop_process(state, name)
        await kube.delete(QUEUES, queue)

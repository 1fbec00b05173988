"""KAI v0.18 background pods end to end (pod label kai.scheduler/background=true).

Two healthcheck pods of a ReplicaSet (1 GPU each, label background, a zero-quota maintenance queue) hold half
of a 4-GPU node. A workload that fits in the idle GPUs binds at once and displaces nothing. A second one that
needs the GPUs they hold is planned as if they were absent: it is pipelined, both healthcheck pods are evicted
through the Eviction API with the action `backgroundpods` and KAI's message (decision stream and the Evict
event on their PodGroups), and it binds once they are gone. The ReplicaSet's replacements wait (no room).
"""

from __future__ import annotations

from e2e_helpers import eventually
from scenario_helpers import (
    REPLICASETS,
    create,
    decision_events,
    events,
    is_running,
    pod,
    pod_group_of,
    podgroup,
    pods,
    replicaset,
    stays,
    wait_decisions,
    wait_events,
    wait_running,
)

BACKGROUND = {"kai.scheduler/background": "true"}
MESSAGE = "Evicted to make room for a workload on this node"
ZERO = {"quota": 0, "limit": -1, "overQuotaWeight": 0}


async def test_background_pods_give_way_only_when_their_room_is_taken(shoal, stack, kube, namespace, node_pool,
                                                                     gpu_nodes, queues):
    (node,) = await gpu_nodes(1, gpus=4)
    maintenance = await queues.add("maintenance", gpu=ZERO, cpu=ZERO, memory=ZERO)
    team = await queues.add("team", gpu={"quota": 4, "limit": -1, "overQuotaWeight": 1})
    rs = replicaset(namespace, "healthcheck", maintenance, node_pool, gpus=1, replicas=2)
    rs["spec"]["template"]["metadata"]["labels"].update(BACKGROUND)
    await kube.create(REPLICASETS, rs, namespace=namespace)

    async def two_running():
        now = await pods(kube, namespace, "healthcheck-")
        running = sorted(n for n, p in now.items() if is_running(p))
        return running if len(running) == 2 else None

    originals = await eventually(two_running, timeout_s=90, what="2 healthcheck pods to run")
    groups = {name: await pod_group_of(kube, namespace, name) for name in originals}

    # fits in the 2 idle GPUs: bound at once, no background pod is touched
    await create(kube, podgroup(namespace, "fits", team, node_pool), pod(namespace, "fits-0", team, node_pool,
                                                                         group="fits", gpus=2))
    await wait_running(kube, namespace, ["fits-0"], timeout_s=60)

    async def none_evicted():
        return not await decision_events(stack, shoal, "evicted", namespace=namespace)

    await stays(none_evicted, seconds=4, interval_s=1.0, what="no eviction while idle GPUs were enough")

    # needs the 2 GPUs the background pods hold
    await create(kube, podgroup(namespace, "needs-room", team, node_pool),
                 pod(namespace, "needs-room-0", team, node_pool, group="needs-room", gpus=2))
    running = await wait_running(kube, namespace, ["needs-room-0"], timeout_s=120)
    assert running["needs-room-0"]["spec"]["nodeName"] == node
    evicted = await wait_decisions(stack, shoal, "evicted", namespace=namespace, count=2, timeout_s=60)
    assert sorted(e["subject"] for e in evicted) == sorted(f"{namespace}/{n}" for n in originals), evicted
    for e in evicted:
        assert e["data"]["action"] == "backgroundpods", e
        assert e["data"]["by"] == f"{namespace}/needs-room", e
        assert e["data"]["message"] == MESSAGE, e
    (pipelined, *_) = await wait_events(kube, namespace, kind="Pod", name="needs-room-0", reason="Pipelined")
    assert pipelined["message"] == f"Pod {namespace}/needs-room-0 was pipelined to node {node}"
    for name, group in groups.items():
        (event, *_) = await wait_events(kube, namespace, kind="PodGroup", name=group, reason="Evict")
        assert event["message"] == MESSAGE, (name, event)
        assert event["metadata"]["annotations"]["evictor-action-type"] == "backgroundpods"
        assert event["metadata"]["annotations"]["evictor-pod-group-name"] == "needs-room"

    async def replacements_wait():  # the ReplicaSet recreates them; the node is full, so they wait
        now = await pods(kube, namespace, "healthcheck-")
        fresh = {n: p for n, p in now.items() if n not in originals}
        return fresh if len(fresh) == 2 and not any((p.get("spec") or {}).get("nodeName")
                                                    for p in fresh.values()) else None

    await eventually(replacements_wait, timeout_s=60, what="2 replacement healthcheck pods, pending")
    assert not await events(kube, namespace, kind="PodGroup", name="fits", reason="Evict")

    async def settled():
        return len(await decision_events(stack, shoal, "evicted", namespace=namespace)) == 2

    await stays(settled, seconds=4, interval_s=1.0, what="exactly 2 evictions")

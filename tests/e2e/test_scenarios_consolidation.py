"""Consolidation (defragmentation) end to end (reference §10 S28): two 1-GPU train pods, each owned by a
ReplicaSet (the controller-manager recreates a moved pod), sit on different 2-GPU nodes; a 2-GPU train pod
arrives. One of them is moved with KAI's consolidation message, the big pod lands on the freed node and the
recreated pod on the other node, so both nodes end up full.

Binpack would put the two small pods on one node, so the fragmentation is made the way an operator would
meet it: each small pod is scheduled while the other node is cordoned, then both nodes are uncordoned.
"""

from __future__ import annotations

from e2e_helpers import eventually
from scenario_helpers import (
    create,
    decision_events,
    is_running,
    node_of,
    pod,
    podgroup,
    pods,
    replicaset,
    stays,
    wait_count_running,
    wait_decisions,
    wait_events,
    wait_running,
)

from shoal.adapters.kube import NODES


async def cordon(kube, node: str, on: bool) -> None:
    await kube.patch(NODES, node, {"spec": {"unschedulable": on}})


async def run_alone_on(kube, namespace: str, rs: dict, node: str, other: str) -> dict:
    await cordon(kube, other, True)
    await create(kube, rs)
    name = rs["metadata"]["name"]
    running = await wait_count_running(kube, namespace, f"{name}-", 1)
    (only,) = running.values()
    assert node_of(only) == node
    await cordon(kube, other, False)
    return only


async def test_s28_consolidation_moves_a_small_pod_so_the_big_one_fits(shoal, stack, kube, namespace, node_pool,
                                                                       gpu_nodes, queues):
    n1, n2 = await gpu_nodes(2, gpus=2)
    q = await queues.add("q", gpu={"quota": 4, "limit": -1, "overQuotaWeight": 1})
    p1 = await run_alone_on(kube, namespace, replicaset(namespace, "p1", q, node_pool), n1, n2)
    p2 = await run_alone_on(kube, namespace, replicaset(namespace, "p2", q, node_pool), n2, n1)
    originals = {p1["metadata"]["name"]: n1, p2["metadata"]["name"]: n2}

    await create(kube, podgroup(namespace, "big", q, node_pool),
                 pod(namespace, "big-0", q, node_pool, group="big", gpus=2))

    (evicted,) = await wait_decisions(stack, shoal, "evicted", namespace=namespace, count=1)
    victim = evicted["subject"].split("/", 1)[1]
    assert victim in originals, evicted
    freed, other = originals[victim], ({n1, n2} - {originals[victim]}).pop()
    message = (f"Pod {namespace}/{victim} was preempted and rescheduled due to bin packing (resource consolidation) "
               "procedure")
    assert evicted["data"]["action"] == "consolidation"
    assert evicted["data"]["message"] == message
    assert evicted["data"]["by"] == f"{namespace}/big"
    victim_group = evicted["data"]["podGroup"].split("/", 1)[1]
    (event,) = await wait_events(kube, namespace, kind="PodGroup", name=victim_group, reason="Evict")
    assert event["message"] == message
    notes = event["metadata"]["annotations"]
    assert notes["evictor-action-type"] == "consolidation"
    assert notes["evictor-pod-group-name"] == "big"

    running = await wait_running(kube, namespace, ["big-0"], timeout_s=60)
    assert node_of(running["big-0"]) == freed
    (pipelined, *_) = await wait_events(kube, namespace, kind="Pod", name="big-0", reason="Pipelined")
    assert pipelined["message"] == f"Pod {namespace}/big-0 was pipelined to node {freed}"

    owner = victim.rsplit("-", 1)[0]

    async def recreated():
        now = await pods(kube, namespace, f"{owner}-")
        fresh = [p for n, p in now.items() if n != victim and is_running(p)]
        return fresh[0] if fresh else None

    replacement = await eventually(recreated, timeout_s=60, what=f"the ReplicaSet {owner} to run its pod again")
    assert node_of(replacement) == other, "the recreated pod lands on the other node"

    async def both_nodes_full():
        now = await pods(kube, namespace)
        used = {n1: 0, n2: 0}
        for p in now.values():
            if is_running(p) and node_of(p) in used:
                used[node_of(p)] += int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        return used == {n1: 2, n2: 2}

    await eventually(both_nodes_full, timeout_s=30, what="both nodes to be full")

    async def settled():
        return (await both_nodes_full()
                and len(await decision_events(stack, shoal, "evicted", namespace=namespace)) == 1)

    await stays(settled, seconds=4, interval_s=1.0, what="one move only, both nodes full")

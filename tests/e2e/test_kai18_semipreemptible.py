"""KAI v0.18 semi-preemptible workloads end to end: the gang's minimum is a protected core.

A semi-preemptible PodGroup (minMember 3) runs 7 one-GPU pods in a queue whose deserved quota is 4 (3 core
pods, 4 surplus over quota). Another queue then needs 4 GPUs on the full node: reclaim takes the 3 newest
surplus pods through the Eviction API and never a core pod; the PodGroup's status.schedulingState.corePods
names the core pods. The admission webhook (registered by the stack's admission service) refuses to raise
the minimum of a running semi-preemptible PodGroup with KAI's message, and lets it be lowered.
"""

from __future__ import annotations

import pytest
from e2e_helpers import eventually
from scenario_helpers import (
    create,
    create_spaced,
    decision_events,
    is_running,
    pod,
    podgroup,
    pods,
    stays,
    wait_decisions,
    wait_events,
    wait_running,
)

from shoal.adapters.kube import PODGROUPS
from shoal.errors import PermanentError

SEMI = "semi-preemptible"
QUOTA_4 = {"quota": 4, "limit": -1, "overQuotaWeight": 1}


async def core_pods(kube, namespace: str, group: str) -> list[str]:
    obj = await kube.get(PODGROUPS, group, namespace=namespace)
    return list(((obj.get("status") or {}).get("schedulingState") or {}).get("corePods") or [])


async def wait_core(kube, namespace: str, group: str, want: list[str]) -> None:
    async def published():
        return await core_pods(kube, namespace, group) == want

    await eventually(published, timeout_s=60, what=f"status.schedulingState.corePods of {group} to be {want}")


async def test_reclaim_takes_the_surplus_and_never_the_core(shoal, stack, kube, namespace, node_pool, gpu_nodes,
                                                            queues):
    await gpu_nodes(1, gpus=8)
    a = await queues.add("a", gpu=QUOTA_4)
    b = await queues.add("b", gpu=QUOTA_4)
    core = [pod(namespace, f"elastic-{i}", a, node_pool, group="elastic", grace=0) for i in range(3)]
    # the surplus pods one creation second apart: victims go newest first
    surplus = [[pod(namespace, f"elastic-{i}", a, node_pool, group="elastic", grace=0)] for i in range(3, 7)]
    await create_spaced(kube, [[podgroup(namespace, "elastic", a, node_pool, min_member=3, preemptibility=SEMI),
                                *core], *surplus])
    await wait_running(kube, namespace, [f"elastic-{i}" for i in range(7)], timeout_s=90)
    await wait_core(kube, namespace, "elastic", ["elastic-0", "elastic-1", "elastic-2"])

    await create(kube, podgroup(namespace, "b-job", b, node_pool, min_member=4),
                 *(pod(namespace, f"b-job-{i}", b, node_pool, group="b-job") for i in range(4)))
    await wait_running(kube, namespace, [f"b-job-{i}" for i in range(4)], timeout_s=120)
    evicted = await wait_decisions(stack, shoal, "evicted", namespace=namespace, count=3, timeout_s=60)
    assert sorted(e["subject"] for e in evicted) == [f"{namespace}/elastic-{i}" for i in (4, 5, 6)], evicted
    for e in evicted:
        assert e["data"]["action"] == "reclaim" and e["data"]["by"] == f"{namespace}/b-job", e
    (event, *_) = await wait_events(kube, namespace, kind="PodGroup", name="elastic", reason="Evict")
    assert event["metadata"]["annotations"]["evictor-action-type"] == "reclaim"

    now = await pods(kube, namespace, "elastic-")
    assert all(is_running(now[f"elastic-{i}"]) for i in range(4)), sorted(now)
    await wait_core(kube, namespace, "elastic", ["elastic-0", "elastic-1", "elastic-2"])

    async def unchanged():  # the core stays, nothing else is evicted over the next cycles
        return len(await decision_events(stack, shoal, "evicted", namespace=namespace)) == 3

    await stays(unchanged, seconds=5, interval_s=1.0, what="exactly 3 evictions")


async def test_webhook_refuses_to_raise_the_minimum_of_a_running_group(shoal, stack, kube, namespace, node_pool,
                                                                     gpu_nodes, queues):
    await gpu_nodes(1, gpus=4)
    q = await queues.add("q", gpu=QUOTA_4)
    await create(kube, podgroup(namespace, "serve", q, node_pool, min_member=2, preemptibility=SEMI),
                 *(pod(namespace, f"serve-{i}", q, node_pool, group="serve") for i in range(3)))
    await wait_running(kube, namespace, ["serve-0", "serve-1", "serve-2"], timeout_s=90)
    await eventually(lambda: core_pods(kube, namespace, "serve"), timeout_s=60, what="core pods published")

    async def raise_denied():
        try:
            await kube.patch(PODGROUPS, "serve", {"spec": {"minMember": 3}}, namespace=namespace)
        except PermanentError as exc:
            return str(exc)
        await kube.patch(PODGROUPS, "serve", {"spec": {"minMember": 2}}, namespace=namespace)  # undo, retry
        return None

    # the apiserver picks up the stack's webhook configuration asynchronously
    message = await eventually(raise_denied, timeout_s=30, what="the PodGroup webhook to refuse the increase")
    assert ("cannot increase minMember (2 -> 3) on a semi-preemptible PodGroup: it would reclassify running "
            "elastic pods or subgroups as core") in message
    with pytest.raises(PermanentError, match=r"cannot increase minMember \(2 -> 5\)"):
        await kube.patch(PODGROUPS, "serve", {"spec": {"minMember": 5}}, namespace=namespace)
    await kube.patch(PODGROUPS, "serve", {"spec": {"minMember": 1}}, namespace=namespace)  # lowering is fine
    assert (await kube.get(PODGROUPS, "serve", namespace=namespace))["spec"]["minMember"] == 1

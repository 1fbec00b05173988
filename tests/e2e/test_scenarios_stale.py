"""Stale gang eviction end to end (reference §10 S5 and its `-1s` variant): a hand-made PodGroup with
minMember 2 and two running 1-GPU pods loses one pod that nothing recreates. A short
`spec.stalenessGracePeriod` (5 s instead of the 60 s default) keeps the test quick.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from e2e_helpers import eventually
from scenario_helpers import (
    STALE_STAMP,
    annotations_of,
    create,
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

from shoal.adapters.kube import PODS

GRACE_S = 5



async def gang_loses_a_pod(kube, namespace: str, pool: str, queue: str, grace: str) -> str:
    """Gang g (minMember 2, pods g-0 and g-1) runs, then g-0 is deleted; returns the stale stamp."""
    await create(kube, podgroup(namespace, "g", queue, pool, min_member=2, stalenessGracePeriod=grace),
                 *(pod(namespace, f"g-{i}", queue, pool, group="g") for i in range(2)))
    await wait_running(kube, namespace, ["g-0", "g-1"])
    await kube.delete(PODS, "g-0", namespace=namespace, body={"gracePeriodSeconds": 0})

    async def stamped():
        return (await annotations_of(kube, namespace, "g")).get(STALE_STAMP)

    return await eventually(stamped, timeout_s=30, what=f"{STALE_STAMP} on PodGroup g")


async def test_s5_stale_gang_remaining_pod_is_evicted_after_the_grace_period(shoal, stack, kube, namespace,
                                                                            node_pool, gpu_nodes, queues):
    await gpu_nodes(1, gpus=4)
    q = await queues.add("q")
    stamp = await gang_loses_a_pod(kube, namespace, node_pool, q, f"{GRACE_S}s")
    stamped_at = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()

    (evicted,) = await wait_decisions(stack, shoal, "evicted", namespace=namespace, count=1, timeout_s=60)
    decided_at = time.time()
    message = f"Workload doesn't meet the minimum required number of pods (2), evicting remaining pod: {namespace}/g-1"
    assert evicted["subject"] == f"{namespace}/g-1"
    assert evicted["data"]["action"] == "stalegangeviction"
    assert evicted["data"]["message"] == message
    # the stamp has whole seconds: the eviction comes at least the grace period after it (1 s of rounding)
    assert decided_at >= stamped_at + GRACE_S - 1, (stamp, decided_at)

    (event,) = await wait_events(kube, namespace, kind="PodGroup", name="g", reason="Evict")
    assert event["type"] == "Normal" and event["message"] == message
    assert event["metadata"]["annotations"]["evictor-action-type"] == "stalegangeviction"
    (stale, *_) = await wait_events(kube, namespace, kind="PodGroup", name="g", reason="StaleJob")
    assert stale["type"] == "Normal"
    assert stale["message"] == "Job is stale. 1 pods are active, minMember is 2"

    async def gone():
        return "g-1" not in await pods(kube, namespace, "g-")

    await eventually(gone, timeout_s=30, what="the remaining pod g-1 to be deleted")


async def test_s5_variant_negative_grace_never_evicts(shoal, stack, kube, namespace, node_pool, gpu_nodes, queues):
    await gpu_nodes(1, gpus=4)
    q = await queues.add("q")
    await gang_loses_a_pod(kube, namespace, node_pool, q, "-1s")

    async def still_running():
        now = await pods(kube, namespace, "g-")
        return ("g-1" in now and is_running(now["g-1"])
                and not await decision_events(stack, shoal, "evicted", namespace=namespace))

    # twice the grace period that evicts in the test above: a negative grace is "never", not "at once"
    await stays(still_running, seconds=2 * GRACE_S + 2, interval_s=1.0, what="the stale gang's pod keeps running")

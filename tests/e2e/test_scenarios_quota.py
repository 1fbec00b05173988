"""Quota and limit end to end (reference §10 S7 with SPEC §2.1, S7 with an explicit `limit: 0`, S9, S11;
seed 000 observations (c) and (e)). Bare pods: the podgrouper service gives each its own PodGroup
(`pg-<pod>-<uid>`), whose scheduling condition carries KAI's message with this test's queue name.
"""

from __future__ import annotations

from e2e_helpers import eventually
from scenario_helpers import (
    create,
    node_of,
    pod,
    pod_group_of,
    pods,
    scheduling_condition,
    stays,
    wait_count_running,
    wait_running,
)

from shoal.core.fields import mapping


async def two_run_third_waits(kube, namespace: str) -> tuple[dict[str, dict], str, str]:
    """Three pods p1..p3 were created: two run; returns (running, the waiting pod, its PodGroup)."""
    running = await wait_count_running(kube, namespace, "p", 2)
    (left,) = {"p1", "p2", "p3"} - set(running)
    return running, left, await pod_group_of(kube, namespace, left)


async def test_s7_omitted_limit_means_quota_so_the_in_quota_pod_runs(shoal, kube, namespace, node_pool, gpu_nodes,
                                                                    queues):
    # seed 000 (e): KAI reads the missing limit as 0 and reports OverLimit "Limit is 0 GPUs"; Shoal reads it
    # as limit = quota (SPEC §2.1), so the 1-GPU pod in a quota-1 queue runs
    await gpu_nodes(1, gpus=8)
    q = await queues.add("q", gpu={"quota": 1})
    await create(kube, pod(namespace, "p1", q, node_pool))
    await wait_running(kube, namespace, ["p1"])

    async def effective_limit():
        st = (await queues.get("q")).get("status") or {}
        return st if mapping(st, "allocated").get("nvidia.com/gpu") == "1" else None

    status = await eventually(effective_limit, timeout_s=30, what="the queue status to show 1 GPU allocated")
    assert status["effectiveLimit"]["gpu"] == 1


async def test_s7_explicit_limit_zero_is_a_cap_with_kais_over_limit_message(shoal, kube, namespace, node_pool,
                                                                           gpu_nodes, queues):
    await gpu_nodes(1, gpus=8)
    q = await queues.add("q", gpu={"quota": 1, "limit": 0})
    await create(kube, pod(namespace, "p1", q, node_pool))
    group = await pod_group_of(kube, namespace, "p1")

    cond = await scheduling_condition(kube, namespace, group)
    assert cond["type"] == "UnschedulableOnNodePool" and cond["reason"] == "Unschedulable"
    assert cond["message"] == (f"OverLimit: {q} quota has reached the allowable limit of GPUs. Limit is 0 GPUs, "
                               "currently 0 GPUs allocated and workload requested 1 GPUs.")
    assert cond["reasons"][0]["reason"] == "OverLimit"
    details = cond["reasons"][0]["details"]["queueDetails"]
    assert details["name"] == q
    assert details["queueResourceLimits"]["nvidia.com/gpu"] == "0"

    async def still_pending():
        return not node_of((await pods(kube, namespace, "p1"))["p1"])

    await stays(still_pending, seconds=3, what="the pod over a limit of 0 stays pending")


async def test_s9_over_quota_up_to_the_limit_then_over_limit(shoal, kube, namespace, node_pool, gpu_nodes, queues):
    await gpu_nodes(1, gpus=8)
    q = await queues.add("q", gpu={"quota": 1, "limit": 2, "overQuotaWeight": 1})
    await create(kube, *(pod(namespace, f"p{i}", q, node_pool, priority="train") for i in (1, 2, 3)))
    _, left, group = await two_run_third_waits(kube, namespace)

    cond = await scheduling_condition(kube, namespace, group)
    assert cond["message"] == (f"OverLimit: {q} quota has reached the allowable limit of GPUs. Limit is 2 GPUs, "
                               "currently 2 GPUs allocated and workload requested 1 GPUs.")
    assert [r["reason"] for r in cond["reasons"]] == ["OverLimit"]
    assert not node_of((await pods(kube, namespace, left))[left])


async def test_s9_variant_unlimited_limit_all_three_run(shoal, kube, namespace, node_pool, gpu_nodes, queues):
    await gpu_nodes(1, gpus=8)
    q = await queues.add("q", gpu={"quota": 1, "limit": -1, "overQuotaWeight": 1})
    await create(kube, *(pod(namespace, f"p{i}", q, node_pool, priority="train") for i in (1, 2, 3)))
    await wait_running(kube, namespace, ["p1", "p2", "p3"])


async def test_s11_non_preemptible_stays_within_quota(shoal, kube, namespace, node_pool, gpu_nodes, queues):
    # seed 000 (c): three inference (125) pods in a quota-2 queue; the third waits with NonPreemptibleOverQuota
    await gpu_nodes(1, gpus=8)
    q = await queues.add("q", gpu={"quota": 2, "limit": -1, "overQuotaWeight": 1})
    await create(kube, *(pod(namespace, f"p{i}", q, node_pool, priority="inference") for i in (1, 2, 3)))
    _, left, group = await two_run_third_waits(kube, namespace)

    cond = await scheduling_condition(kube, namespace, group)
    assert cond["message"] == (
        f"NonPreemptibleOverQuota: Non-preemptible workload is over quota. Workload requested 1 GPUs, but {q} "
        "quota is 2 GPUs, while 2 GPUs are already allocated for non-preemptible pods. Use a preemptible workload "
        "to go over quota.")
    assert [r["reason"] for r in cond["reasons"]] == ["NonPreemptibleOverQuota"]
    assert not node_of((await pods(kube, namespace, left))[left])

    async def non_preemptible_allocated():
        st = (await queues.get("q")).get("status") or {}
        return st if mapping(st, "allocatedNonPreemptible").get("nvidia.com/gpu") == "2" else None

    status = await eventually(non_preemptible_allocated, timeout_s=30,
                              what="queue status allocatedNonPreemptible to show 2 GPUs")
    assert status["allocated"]["nvidia.com/gpu"] == "2"

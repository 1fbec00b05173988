"""GPU sharing end to end beyond S30/S34 (those are in test_gpu_sharing.py): fraction bin-packing onto an
existing shared GPU (reference §10 S32, gpupack) and fractions counting against a queue's limit (S33).
Bare `gpu-fraction` pods; the podgrouper service gives each its own PodGroup.
"""

from __future__ import annotations

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

from shoal.adapters.kube import PODS

RESERVATION_NS = "kai-resource-reservation"
GROUP_LABEL = "runai-gpu-group"



def fraction_pod(namespace: str, name: str, queue: str, pool: str, fraction: str) -> dict:
    return pod(namespace, name, queue, pool, gpus=0, annotations={"gpu-fraction": fraction})


async def reservations_on(kube, node: str) -> list[dict]:
    items, _ = await kube.list(PODS, namespace=RESERVATION_NS, label_selector="app=kai-resource-reservation")
    return [p for p in items if node_of(p) == node and not p["metadata"].get("deletionTimestamp")]


async def test_s32_a_new_fraction_joins_the_partly_used_gpu(shoal, kube, namespace, node_pool, gpu_nodes, queues):
    (node,) = await gpu_nodes(1, gpus=2, gpu_memory_mib=40960)
    q = await queues.add("q")
    await create(kube, fraction_pod(namespace, "old", q, node_pool, "0.5"))
    old = (await wait_running(kube, namespace, ["old"], timeout_s=90))["old"]
    group = old["metadata"]["labels"][GROUP_LABEL]
    (reservation,) = await reservations_on(kube, node)
    assert reservation["metadata"]["labels"][GROUP_LABEL] == group

    await create(kube, fraction_pod(namespace, "new", q, node_pool, "0.3"))
    new = (await wait_running(kube, namespace, ["new"], timeout_s=90))["new"]
    assert node_of(new) == node
    assert new["metadata"]["labels"][GROUP_LABEL] == group, "gpupack: the 0.3 pod joins the 0.5 pod's GPU"
    assert new["metadata"]["annotations"]["received-resource-type"] == "Fraction"
    now = await reservations_on(kube, node)
    assert [p["metadata"]["name"] for p in now] == [reservation["metadata"]["name"]], "no new reservation pod"


async def test_s33_fractions_count_against_the_limit(shoal, kube, namespace, node_pool, gpu_nodes, queues):
    await gpu_nodes(1, gpus=4, gpu_memory_mib=40960)
    q = await queues.add("q", gpu={"quota": -1, "limit": 1, "overQuotaWeight": 1})
    await create(kube, *(fraction_pod(namespace, f"h{i}", q, node_pool, "0.5") for i in (1, 2, 3)))
    running = await wait_count_running(kube, namespace, "h", 2, timeout_s=90)
    (left,) = {"h1", "h2", "h3"} - set(running)
    group = await pod_group_of(kube, namespace, left)

    cond = await scheduling_condition(kube, namespace, group, starts_with="OverLimit")
    assert cond["message"] == (f"OverLimit: {q} quota has reached the allowable limit of GPUs. Limit is 1 GPUs, "
                               "currently 1 GPUs allocated and workload requested 0.5 GPUs.")
    assert [r["reason"] for r in cond["reasons"]] == ["OverLimit"]

    async def third_waits():
        return not node_of((await pods(kube, namespace, left))[left])

    await stays(third_waits, seconds=3, what=f"{left} stays pending over the limit")

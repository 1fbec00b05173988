"""Priority preemption inside one queue end to end (reference §10 S23 = seed 000 observation (b), S25):
explicit PodGroups and bare pods. The victims keep the default 30 s terminationGracePeriodSeconds; the fake
kubelet finishes a graceful delete after ~1 s, so the seed's ~36 s (30 s grace + cycles) becomes a few
seconds here.
"""

from __future__ import annotations

import time

from scenario_helpers import (
    create,
    create_spaced,
    decision_events,
    events,
    is_running,
    node_of,
    pod,
    podgroup,
    pods,
    scheduling_condition,
    stays,
    wait_decisions,
    wait_events,
    wait_running,
)


def single(namespace: str, name: str, queue: str, pool: str, priority: str) -> list[dict]:
    return [podgroup(namespace, name, queue, pool, priority=priority),
            pod(namespace, f"{name}-0", queue, pool, group=name, grace=30)]


async def test_s23_build_pod_preempts_the_newest_train_pod(shoal, stack, kube, namespace, node_pool, gpu_nodes,
                                                           queues):
    (node,) = await gpu_nodes(1, gpus=4)
    q = await queues.add("q", gpu={"quota": 1, "limit": -1, "overQuotaWeight": 1})
    older = [doc for i in range(3) for doc in single(namespace, f"train{i}", q, node_pool, "train")]
    await create_spaced(kube, [older, single(namespace, "train3", q, node_pool, "train")])
    await wait_running(kube, namespace, [f"train{i}-0" for i in range(4)])

    started = time.monotonic()
    await create(kube, *single(namespace, "newcomer", q, node_pool, "build"))
    running = await wait_running(kube, namespace, ["newcomer-0"], timeout_s=60)
    elapsed = time.monotonic() - started
    print(f"\nS23: build pod created -> running in {elapsed:.1f}s (seed 000 (b): ~36 s with a real 30 s grace)")
    assert node_of(running["newcomer-0"]) == node

    (evicted,) = await wait_decisions(stack, shoal, "evicted", namespace=namespace, count=1)
    message = f"Pod {namespace}/train3-0 was preempted by higher priority workload {namespace}/newcomer"
    assert evicted["subject"] == f"{namespace}/train3-0"
    assert evicted["data"]["action"] == "preempt"
    assert evicted["data"]["by"] == f"{namespace}/newcomer"
    assert evicted["data"]["message"] == message
    (event,) = await wait_events(kube, namespace, kind="PodGroup", name="train3", reason="Evict")
    assert event["type"] == "Normal" and event["message"] == message
    notes = event["metadata"]["annotations"]
    assert notes["evictor-action-type"] == "preempt"
    assert notes["evictor-pod-group-name"] == "newcomer"
    assert notes["evictor-pod-group-namespace"] == namespace

    (pipelined, *_) = await wait_events(kube, namespace, kind="Pod", name="newcomer-0", reason="Pipelined")
    assert pipelined["message"] == f"Pod {namespace}/newcomer-0 was pipelined to node {node}"
    now = await pods(kube, namespace)
    assert sorted(n for n, p in now.items() if is_running(p)) == ["newcomer-0", "train0-0", "train1-0", "train2-0"]
    assert "train3-0" not in now, "a bare victim is not recreated"

    async def one_eviction_only():
        return len(await decision_events(stack, shoal, "evicted", namespace=namespace)) == 1

    await stays(one_eviction_only, seconds=3, interval_s=1.0, what="exactly one preemption")


async def test_s25_non_preemptible_victims_are_protected(shoal, stack, kube, namespace, node_pool, gpu_nodes, queues):
    await gpu_nodes(1, gpus=4)
    q = await queues.add("q", gpu={"quota": 4, "limit": -1, "overQuotaWeight": 1})
    builds = [f"build{i}" for i in range(4)]
    await create(kube, *(doc for b in builds for doc in single(namespace, b, q, node_pool, "build")))
    await wait_running(kube, namespace, [f"{b}-0" for b in builds])

    await create(kube, *single(namespace, "newcomer", q, node_pool, "inference"))
    # the inference pod is non-preemptible too: with 4 of 4 quota GPUs held by non-preemptible pods it is over
    # quota (reference §3.4, §4.5: a non-preemptible preemptor must pass NonPreemptibleOverQuota first)
    cond = await scheduling_condition(kube, namespace, "newcomer")
    assert cond["message"] == (
        f"NonPreemptibleOverQuota: Non-preemptible workload is over quota. Workload requested 1 GPUs, but {q} "
        "quota is 4 GPUs, while 4 GPUs are already allocated for non-preemptible pods. Use a preemptible workload "
        "to go over quota.")

    async def nothing_evicted():
        now = await pods(kube, namespace)
        return (all(is_running(now[f"{b}-0"]) for b in builds) and not node_of(now["newcomer-0"])
                and not await decision_events(stack, shoal, "evicted", namespace=namespace))

    await stays(nothing_evicted, seconds=5, interval_s=1.0, what="no eviction of non-preemptible pods")
    for b in builds:
        assert not await events(kube, namespace, kind="PodGroup", name=b, reason="Evict")

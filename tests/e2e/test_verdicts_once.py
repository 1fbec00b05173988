"""Each pending verdict is on the decision stream once: a pending gang's `unschedulable` decision appears once
over several planning cycles (its PodGroup condition is not rewritten either), and again when its message
changes (services.planner.verdicts, shoal.adapters.verdicts)."""

from __future__ import annotations

import json
from typing import Any

from e2e_helpers import eventually
from scenario_helpers import create, decision_events, pod, podgroup, wait_decisions

from shoal.adapters.kube import PODGROUPS

FOUR_OF_FIVE = "Resources were found for 4 pods while 5 are required for gang scheduling"
THREE_OF_FIVE = "Resources were found for 3 pods while 5 are required for gang scheduling"


def plans_of(shoal: Any, pool: str) -> int:
    """How many plans the planner published for the shard so far (its `plan_published` log lines)."""
    count = 0
    for line in shoal.log("planner").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        count += record.get("event") == "plan_published" and record.get("shard") == pool
    return count


async def test_a_pending_verdict_is_published_once_and_again_when_it_changes(shoal, stack, kube, namespace, queue,
                                                                              node_pool, gpu_nodes):
    await gpu_nodes(2, gpus=2)
    await create(kube, podgroup(namespace, "gang", queue, node_pool, min_member=5),
                 *(pod(namespace, f"gang-{i}", queue, node_pool, group="gang") for i in range(5)))
    first = await wait_decisions(stack, shoal, "unschedulable", namespace=namespace, count=1, timeout_s=120)
    assert FOUR_OF_FIVE in first[0]["data"]["message"], first
    before = await kube.get(PODGROUPS, "gang", namespace=namespace)
    cycles = plans_of(shoal, node_pool)

    async def three_more_cycles() -> bool:
        return plans_of(shoal, node_pool) >= cycles + 3  # the snapshotter's heartbeat re-announces every 10 s

    await eventually(three_more_cycles, timeout_s=120, interval_s=1.0, what="three more planning cycles")
    verdicts = await decision_events(stack, shoal, "unschedulable", namespace=namespace)
    assert [v["subject"] for v in verdicts] == [f"{namespace}/gang"], verdicts
    after = await kube.get(PODGROUPS, "gang", namespace=namespace)
    assert after["status"]["schedulingConditions"] == before["status"]["schedulingConditions"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]  # not rewritten

    # a one-GPU pod of another group takes a GPU: the gang's message changes, and is published once more
    await create(kube, pod(namespace, "solo", queue, node_pool))
    changed = await wait_decisions(stack, shoal, "unschedulable", namespace=namespace, count=2, timeout_s=120)
    assert [v["subject"] for v in changed] == [f"{namespace}/gang"] * 2, changed
    assert THREE_OF_FIVE in changed[1]["data"]["message"], changed

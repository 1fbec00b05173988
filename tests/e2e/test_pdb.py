"""Evictions respect PodDisruptionBudgets (SPEC §2.2): KAI deletes victims directly; Shoal evicts through the
Eviction API, and a victim whose PDB allows no disruption is not chosen: the planner takes the next victim
instead of asking for an eviction the API would refuse."""

from __future__ import annotations

from e2e_helpers import eventually
from scenario_helpers import (
    create,
    create_spaced,
    is_running,
    pod,
    podgroup,
    pods,
    wait_decisions,
    wait_running,
)

from shoal.adapters import kube as k

PDBS = k.PDBS



def single(namespace, name, queue, pool, priority, labels=None):
    p = pod(namespace, f"{name}-0", queue, pool, group=name)
    p["metadata"].setdefault("labels", {}).update(labels or {})
    return [podgroup(namespace, name, queue, pool, priority=priority), p]


async def test_preemption_skips_a_victim_protected_by_a_pdb(shoal, stack, kube, namespace, node_pool, gpu_nodes,
                                                             queues):
    await gpu_nodes(1, gpus=4)
    q = await queues.add("q", gpu={"quota": 1, "limit": -1, "overQuotaWeight": 1})
    older = [doc for i in range(3) for doc in single(namespace, f"train{i}", q, node_pool, "train")]
    newest = single(namespace, "train3", q, node_pool, "train", labels={"protect": "yes"})
    await create_spaced(kube, [older, newest])
    await wait_running(kube, namespace, [f"train{i}-0" for i in range(4)])
    # the newest train pod (KAI's first choice) is covered by a PDB that allows no disruption
    await kube.create(PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                             "metadata": {"name": "keep-train3", "namespace": namespace},
                             "spec": {"minAvailable": 1, "selector": {"matchLabels": {"protect": "yes"}}}},
                      namespace=namespace)

    async def budget_computed():
        pdb = await kube.get(PDBS, "keep-train3", namespace=namespace)
        status = pdb.get("status") or {}
        return status.get("currentHealthy") == 1 and status.get("disruptionsAllowed") == 0

    await eventually(budget_computed, timeout_s=60, what="the disruption controller to compute the PDB status")

    await create(kube, *single(namespace, "newcomer", q, node_pool, "build"))
    await wait_running(kube, namespace, ["newcomer-0"], timeout_s=60)
    (evicted,) = await wait_decisions(stack, shoal, "evicted", namespace=namespace, count=1)
    # train0..2 were created in the same second, so any of them is a legitimate next victim (ties go by uid)
    assert evicted["subject"] in {f"{namespace}/train{i}-0" for i in range(3)}, \
        "the PDB-protected newest pod must not be the victim"
    assert evicted["data"]["action"] == "preempt"
    now = await pods(kube, namespace)
    assert is_running(now["train3-0"]), "the PDB-protected pod keeps running"

"""The walking skeleton: separate services connected only by Kafka and Redis schedule real pods.

A 3-pod gang (minMember 3, 1 GPU each) on 2 fake nodes × 2 GPUs is bound through pods/binding in one
decision; a 5-pod gang on the same shape stays Pending with KAI's gang message and no pod bound.
"""

from __future__ import annotations

import json
from pathlib import Path

from e2e_helpers import decisions, eventually

from shoal.adapters.kube import PODGROUPS, PODS
from shoal.core.fields import mapping

SCHEMA = json.loads((Path(__file__).parents[1] / "contracts" / "decision.schema.json").read_text())


def gang(namespace: str, name: str, queue: str, pool: str, size: int, min_member: int) -> list[dict]:
    pg = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
          "metadata": {"name": name, "namespace": namespace, "labels": {"kai.scheduler/node-pool": pool}},
          "spec": {"minMember": min_member, "queue": queue, "priorityClassName": "train"}}
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{name}-{i}", "namespace": namespace,
                          "annotations": {"pod-group-name": name},
                          "labels": {"kai.scheduler/queue": queue, "kai.scheduler/node-pool": pool}},
             "spec": {"schedulerName": "shoal-scheduler", "terminationGracePeriodSeconds": 0,
                      "containers": [{"name": "main", "image": "busybox",
                                      "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
            for i in range(size)]
    return [pg, *pods]


async def create_all(kube, docs):
    for doc in docs:
        resource = PODGROUPS if doc["kind"] == "PodGroup" else PODS
        await kube.create(resource, doc, namespace=doc["metadata"]["namespace"])


async def pods_of(kube, namespace: str, prefix: str) -> list[dict]:
    items, _ = await kube.list(PODS, namespace=namespace)
    return [p for p in items if p["metadata"]["name"].startswith(prefix)]


async def test_three_pod_gang_is_bound_in_one_decision(shoal, stack, kube, namespace, queue, node_pool, gpu_nodes):
    await gpu_nodes(2, gpus=2)
    await create_all(kube, gang(namespace, "trio", queue, node_pool, size=3, min_member=3))

    async def all_bound():
        pods = await pods_of(kube, namespace, "trio-")
        return pods if len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = await eventually(all_bound, timeout_s=90, what="the 3-pod gang to be bound")
    used = sorted(p["spec"]["nodeName"] for p in pods)
    assert set(used) <= {f"{node_pool}-n1", f"{node_pool}-n2"}
    assert max(used.count(n) for n in set(used)) <= 2, "a node got more than its 2 GPUs"

    async def running():
        return all((p.get("status") or {}).get("phase") == "Running" for p in await pods_of(kube, namespace, "trio-"))

    await eventually(running, timeout_s=30, what="the fake kubelet to run the pods")

    events = await decisions(stack.kafka_bootstrap, f"{shoal.topic_prefix}shoal.decisions.v1")
    import jsonschema

    for event in events:
        jsonschema.validate(event, SCHEMA)
    scheduled = [e for e in events if e["type"] == "io.shoal.decision.scheduled"
                 and e["subject"].startswith(f"{namespace}/trio-")]
    assert sorted(e["subject"] for e in scheduled) == [f"{namespace}/trio-{i}" for i in range(3)]
    assert len({e["planid"] for e in scheduled}) == 1, "the gang must be bound by one decision (one plan)"
    bound = {e["subject"] for e in events if e["type"] == "io.shoal.decision.bound"}
    assert {f"{namespace}/trio-{i}" for i in range(3)} <= bound


async def test_five_pod_gang_stays_pending_with_reason(shoal, kube, namespace, queue, node_pool, gpu_nodes):
    await gpu_nodes(2, gpus=2)
    await create_all(kube, gang(namespace, "quint", queue, node_pool, size=5, min_member=5))

    async def condition():
        pg = await kube.get(PODGROUPS, "quint", namespace=namespace)
        conds = (pg.get("status") or {}).get("schedulingConditions") or []
        return conds[0] if conds else None

    cond = await eventually(condition, timeout_s=90, what="the PodGroup's scheduling condition")
    assert cond["type"] == "UnschedulableOnNodePool"
    assert cond["reason"] == "Unschedulable"
    assert "Resources were found for 4 pods while 5 are required for gang scheduling" in cond["message"]
    pods = await pods_of(kube, namespace, "quint-")
    assert len(pods) == 5
    assert not any(p["spec"].get("nodeName") for p in pods), "no pod of an unsatisfiable gang may be bound"


async def test_queue_status_shows_allocation_and_effective_limit(shoal, kube, namespace, node_pool, gpu_nodes):
    from shoal.adapters.kube import QUEUES

    await gpu_nodes(1, gpus=2)
    name = f"qs-{node_pool}"
    # gpu limit omitted: Shoal reads it as limit = quota (SPEC §2.1) and reports that as the effective limit
    await kube.create(QUEUES, {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
                               "spec": {"resources": {"gpu": {"quota": 2, "overQuotaWeight": 1},
                                                      "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                                      "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}})
    try:
        await create_all(kube, gang(namespace, "duo", name, node_pool, size=2, min_member=2))

        async def status():
            q = await kube.get(QUEUES, name)
            st = q.get("status") or {}
            return st if mapping(st, "allocated").get("nvidia.com/gpu") == "2" else None

        st = await eventually(status, timeout_s=90, what="the queue status to show 2 GPUs allocated")
        assert st["effectiveLimit"]["gpu"] == 2
        assert st["requested"]["nvidia.com/gpu"] == "2"
    finally:
        await kube.delete(QUEUES, name)

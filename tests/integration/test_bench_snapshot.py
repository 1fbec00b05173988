"""`shoal bench snapshot` end to end on the suite's Redis and Kafka: a small cluster through the snapshotter's
translation and typed snapshots to a real planner process, which answers every revision with its plan
(correctness only: every figure is there, the first plan binds what fits; no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shoal.devstack.benchsnapshot import run


def cluster() -> dict:
    items: list[dict] = [{"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
                          "spec": {"resources": {"gpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}}]
    for i in range(2):
        items.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}", "labels": {}},
                      "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "256Gi",
                                                 "pods": "110"}}})
    for i in range(6):
        items.append({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                      "metadata": {"name": f"pg{i}", "namespace": "ns"},
                      "spec": {"minMember": 1, "queue": "q", "priorityClassName": "train"}})
        spec: dict[str, Any] = {"schedulerName": "shoal-scheduler",
                                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
        if i < 3:
            spec["nodeName"] = "n0"
        items.append({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": f"p{i}", "namespace": "ns", "annotations": {"pod-group-name": f"pg{i}"},
                                   "labels": {"kai.scheduler/queue": "q"},
                                   "creationTimestamp": "2025-12-31T00:00:00Z"},
                      "spec": spec, "status": {"phase": "Running" if i < 3 else "Pending"}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


async def test_a_cluster_reaches_the_planner_as_a_base_then_as_deltas(stack: Any, tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(cluster()))
    result = await run([str(path)], churn=1, rounds=2, redis_url=stack.redis_url, bootstrap=stack.kafka_bootstrap)
    assert result["nodes"] == 2 and result["base_bytes"] > 0
    assert result["first_plan_ops"].get("Bind") == 3  # the three pending 2-GPU pods fit
    assert len(result["rounds"]) == 2
    for row in result["rounds"]:
        assert row["delta_bytes"] > 0 and row["announce_to_plan_s"] > 0 and row["events"] == 4  # a pod bound, one gone, a new PodGroup and its pod

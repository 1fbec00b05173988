"""`kubectl shoal` output: figures read from the cluster have the api's shapes, tables and -o json|yaml|wide."""

from __future__ import annotations

import json

import pytest
import yaml

from shoal.cli import kubectl_cluster as cluster
from shoal.cli.kubectl import emit
from shoal.cli.kubectl_verbs import decision_line, event_line, queues_table, top_nodes_table, top_queues_table

QUEUE = {"metadata": {"name": "q"},
         "spec": {"resources": {"gpu": {"quota": 4, "overQuotaWeight": 1}, "cpu": {"quota": -1, "limit": -1},
                                "memory": {"quota": 2000, "limit": 4000}}},
         "status": {"allocated": {"cpu": "1500m", "memory": "1000000", "nvidia.com/gpu": "3"},
                    "fairShare": {"cpu": "8000m", "memory": "2000000000", "nvidia.com/gpu": "4"},
                    "deserved": {"cpu": "-1", "memory": "2000000000", "nvidia.com/gpu": "4"},
                    "requested": {"cpu": "2", "memory": "0", "nvidia.com/gpu": "5"},
                    "effectiveLimit": {"gpu": 4, "cpu": -1, "memory": 4000}}}


def node(name: str, gpus: int, pool: str = "pool-a") -> dict:
    return {"metadata": {"name": name, "labels": {"kai.scheduler/node-pool": pool}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "8"}}}


def pod(name: str, node_name: str, *, gpus: int = 0, fraction: str | None = None, namespace: str = "ns",
        queue: str = "q", phase: str = "Running") -> dict:
    meta: dict = {"name": name, "namespace": namespace, "labels": {"kai.scheduler/queue": queue}}
    if fraction:
        meta["annotations"] = {"gpu-fraction": fraction}
    container: dict = {"name": "main"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {"metadata": meta, "spec": {"nodeName": node_name, "containers": [container]}, "status": {"phase": phase}}


def test_queue_figures_come_from_status_and_spec() -> None:
    f = cluster.queue_figures(QUEUE)
    assert f["gpu"] == {"deserved": 4, "fairShare": 4, "allocated": 3, "limit": 4, "request": 5,
                        "allocatedNonPreemptible": 0}
    assert f["cpu"]["allocated"] == 1.5 and f["cpu"]["fairShare"] == 8 and f["cpu"]["limit"] == -1
    assert f["memory"]["limit"] == 4_000_000_000  # MB in the spec and effectiveLimit, bytes shown
    bare = cluster.queue_figures({"metadata": {"name": "q"}, "spec": QUEUE["spec"]}, gpus_in_use=2)
    assert bare["gpu"]["limit"] == 4 and bare["gpu"]["deserved"] == 4 and bare["gpu"]["allocated"] == 2  # limit=quota


def test_node_rows_count_whole_and_shared_gpus() -> None:
    pods = [pod("a", "n1", gpus=2), pod("b", "n1", fraction="0.5"), pod("c", "n1", fraction="0.25"),
            pod("gpu-reservation-n1-x", "n1", gpus=1, namespace="kai-resource-reservation", queue=""),
            pod("done", "n1", gpus=1, phase="Succeeded"), pod("d", "n2", gpus=1)]
    rows = cluster.node_rows([node("n1", 4), node("n2", 2, pool="pool-b"), node("cpu-only", 0)], pods)
    assert rows == [
        {"node": "n1", "pool": "pool-a", "gpus": 4, "used": 3, "whole": 2, "shared": 1, "portions": 0.75, "pods": 3,
         "free": 1},
        {"node": "n2", "pool": "pool-b", "gpus": 2, "used": 1, "whole": 1, "shared": 0, "portions": 0, "pods": 1,
         "free": 1}]
    assert cluster.gpus_by_queue(pods) == {"q": 3.75}


def test_queues_answer_has_the_api_shape() -> None:
    answer = cluster.queues_answer([QUEUE], [pod("a", "n1", gpus=2)])
    assert list(answer["shards"]) == ["-"]
    assert answer["shards"]["-"]["queues"]["q"]["gpu"]["allocated"] == 2  # counted from the pods
    assert cluster.queues_answer([], []) == {"shards": {}}


def test_shoal_events_are_the_binders_only() -> None:
    ours = {"involvedObject": {"kind": "PodGroup", "name": "pg", "namespace": "ns"}, "reason": "Unschedulable",
            "message": "m", "type": "Warning", "lastTimestamp": "2026-01-01T00:00:02Z", "count": 3,
            "reportingComponent": "shoal-scheduler"}
    theirs = {**ours, "reportingComponent": "", "source": {"component": "kubelet"}}
    assert cluster.shoal_events([theirs, ours]) == [
        {"time": "2026-01-01T00:00:02Z", "type": "Warning", "reason": "Unschedulable", "object": "PodGroup/pg",
         "namespace": "ns", "message": "m", "count": 3}]
    row = cluster.shoal_events([ours])[0]
    assert event_line(row, False).endswith("ns/PodGroup/pg  m") and event_line(row, True).endswith("(x3)")


SHARDS = {"pool-a": {"revision": 3, "producedAt": "t", "queues": {"q": cluster.queue_figures(QUEUE)}}}


def test_tables_plain_and_wide() -> None:
    plain = queues_table(SHARDS, False).splitlines()
    assert plain[0].split()[:4] == ["SHARD", "QUEUE", "GPU", "DESERVED"] and plain[1].split()[:2] == ["pool-a", "q"]
    wide = queues_table(SHARDS, True).splitlines()
    assert "CPU LIMIT" in wide[0] and "unlimited" in wide[1] and len(wide[0]) > len(plain[0])
    top = top_queues_table(SHARDS, False).splitlines()
    assert top[0].split()[:3] == ["QUEUE", "SHARD", "GPU"] and top[1].split() == ["q", "pool-a", "3", "4", "4", "4",
                                                                                   "75%"]
    assert "CPU ALLOC" in top_queues_table(SHARDS, True)
    nodes = top_nodes_table([{"node": "n1", "pool": "p", "gpus": 4, "used": 3, "whole": 2, "shared": 1,
                              "portions": 0.75, "pods": 3, "free": 1}], True).splitlines()
    assert nodes[0].split()[:2] == ["NODE", "POOL"] and nodes[1].split() == ["n1", "p", "4", "3", "1", "75%", "2",
                                                                             "1", "0.75", "3"]
    event = {"type": "io.shoal.decision.scheduled", "subject": "ns/p-0", "time": "2026-01-01T00:00:00.000Z",
             "data": {"node": "n1"}, "shard": "pool-a", "source": "shoal/planner/pool-a"}
    assert decision_line(event, False).endswith("ns/p-0  -> n1")
    assert decision_line(event, True).endswith("[shard pool-a, shoal/planner/pool-a]")


@pytest.mark.parametrize("output", ["json", "yaml", "wide", None])
def test_emit_follows_kubectls_output_flag(output: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    emit({"shards": SHARDS}, output, lambda wide: queues_table(SHARDS, wide))
    out = capsys.readouterr().out
    if output == "json":
        assert json.loads(out)["shards"]["pool-a"]["queues"]["q"]["gpu"]["fairShare"] == 4
    elif output == "yaml":
        assert yaml.safe_load(out)["shards"]["pool-a"]["revision"] == 3
    else:
        assert out.startswith("SHARD") and ("MEM LIMIT" in out) == (output == "wide")

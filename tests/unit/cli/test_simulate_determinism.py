"""SPEC §2.3: the same documents in any order give byte-identical `shoal simulate` output."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.cli.manifests import load_documents
from shoal.cli.simulate_output import render_json
from shoal.cli.simulation import simulate

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
CASES = ["s14_fair_share_weights", "s30_two_halves_share_one_card", "s06b_subgroup_elastic",
         "s09_over_quota_up_to_limit", "s32_fraction_binpack", "s12b_default_queue_preemptible"]


def documents() -> list[dict]:
    """Several scenarios merged into one cluster (namespaced apart so nothing collides)."""
    out: list[dict] = []
    for i, name in enumerate(CASES):
        docs, _ = load_documents([str(SCENARIOS / name / "cluster.yaml")])
        for doc in docs:
            meta = doc["metadata"]
            if doc["kind"] in ("Node", "Queue"):
                meta["name"] = f"{meta['name']}-{i}"
                spec = doc.get("spec") or {}
                if spec.get("parentQueue"):
                    spec["parentQueue"] = f"{spec['parentQueue']}-{i}"
            else:
                meta["namespace"] = f"ns{i}"
                if doc["kind"] == "PodGroup":
                    doc["spec"]["queue"] = f"{doc['spec']['queue']}-{i}"
            for holder in (meta, ((doc.get("spec") or {}).get("template") or {}).get("metadata") or {}):
                labels = holder.get("labels") or {}
                if "kai.scheduler/queue" in labels:
                    labels["kai.scheduler/queue"] = f"{labels['kai.scheduler/queue']}-{i}"
            if doc["kind"] == "Pod" and doc["spec"].get("nodeName"):
                doc["spec"]["nodeName"] = f"{doc['spec']['nodeName']}-{i}"
            if "uid" in meta:
                meta["uid"] = f"{meta['uid']}-{i}"
        out.extend(docs)
    return out


def preemption_cluster() -> list[dict]:
    """A full node of running train pods (a Job's, so evicted ones are recreated) and a build pod arriving."""
    gpu = {"quota": 4, "limit": -1, "overQuotaWeight": 1}
    docs: list[dict] = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "pn1", "labels": {"pool": "pre"}},
         "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": "4"}}},
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "pq"},
         "spec": {"resources": {"gpu": gpu, "cpu": {"quota": -1, "limit": -1}, "memory": {"quota": -1, "limit": -1}}}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "pre", "uid": "job-train"},
         "spec": {"parallelism": 4, "template": {"spec": {"schedulerName": "kai-scheduler", "containers": [{}]}}}},
    ]
    for i in range(4):
        docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"train-{i}", "namespace": "pre", "labels": {"kai.scheduler/queue": "pq"},
            "creationTimestamp": f"2026-01-01T00:00:0{i}Z",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-train",
                                 "controller": True}]},
            "spec": {"schedulerName": "kai-scheduler", "nodeName": "pn1",
                     "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}, "status": {"phase": "Running"}})
    docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "urgent", "namespace": "pre",
                 "labels": {"kai.scheduler/queue": "pq"}, "creationTimestamp": "2026-01-01T00:00:30Z"},
                 "spec": {"schedulerName": "kai-scheduler", "priorityClassName": "build", "nodeSelector": {"pool": "pre"},
                          "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}})
    return docs


def render(docs: list[dict]) -> str:
    result = simulate(docs, cycles=3)
    assert not result.problems, result.problems
    return json.dumps(render_json(result), separators=(",", ":"))


BASE_DOCS = documents() + preemption_cluster()
BASELINE = render(BASE_DOCS)


def test_merged_cluster_schedules_something() -> None:
    data = json.loads(BASELINE)
    assert data["cycles"][0]["binds"], "the merged cluster should bind pods"
    assert "pre/urgent" in data["final"]["pods"]
    assert len(data["final"]["podGroups"]) >= 6


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.permutations(range(len(BASE_DOCS))))
def test_output_is_identical_under_permutation(order: list[int]) -> None:
    assert render([BASE_DOCS[i] for i in order]) == BASELINE

"""The simulate loop acting as the cluster: binds, pipelines, evictions, recreation, status write-back."""

from __future__ import annotations

from shoal.cli.simulate_output import final_json, gpus
from shoal.cli.simulation import _apply, simulate
from shoal.core.plan import (
    Annotate,
    Bind,
    ClearCondition,
    ConditionReason,
    Evict,
    Pipeline,
    SetCondition,
    make_plan,
)


def pod(name, owner=None, node=None, **labels):
    meta = {"name": name, "namespace": "ns", "uid": f"u-{name}", "labels": dict(labels),
            "annotations": {"pod-group-name": "pg"}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": "job-uid",
                                    "controller": True}]
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"schedulerName": "kai-scheduler", "containers": []}}
    if node:
        doc["spec"]["nodeName"] = node
        doc["status"] = {"phase": "Running"}
    return doc


def group():
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg", "namespace": "ns"},
            "spec": {"minMember": 1, "queue": "q"}}


def test_apply_binds_pipelines_evicts_and_recreates():
    docs = [group(), pod("a"), pod("b"), pod("c", owner="job", node="n1"), pod("d", node="n1"), pod("e")]
    plan = make_plan(1, [
        Bind(pod="ns/a", pod_uid="u-a", node="n1", gpu_groups=("g1",), fraction="0.50", gpus=1,
             received_resource_type="Fraction"),
        Bind(pod="ns/e", pod_uid="u-e", node="n2", gpu_groups=("g2", "g3"), fraction="0.50", gpus=2,
             received_resource_type="Fraction"),
        Pipeline(pod="ns/b", pod_uid="u-b", node="n1"),
        Evict(pod="ns/c", pod_uid="u-c", node="n1", action="preempt", by="ns/other", message="m"),
        Evict(pod="ns/d", pod_uid="u-d", node="n1", action="reclaim", by="ns/other", message="m"),
        Annotate(pod_group="ns/pg", key="kai.scheduler/last-start-timestamp", value="2026-01-01T00:00:00Z"),
        SetCondition(pod_group="ns/pg", reason="OverLimit", message="OverLimit: x.",
                     reasons=(ConditionReason(reason="OverLimit", message="x"),)),
    ], [])
    after = _apply(docs, plan, 3, "2026-01-01T00:00:02Z")
    by_name = {d["metadata"]["name"]: d for d in after}
    assert "d" not in by_name and "c" not in by_name
    fresh = by_name["c-r3"]
    assert fresh["status"] == {"phase": "Pending"} and "nodeName" not in fresh["spec"]
    assert fresh["metadata"]["ownerReferences"][0]["name"] == "job"
    assert fresh["metadata"]["creationTimestamp"] == "2026-01-01T00:00:02Z"
    assert by_name["a"]["spec"]["nodeName"] == "n1" and by_name["a"]["metadata"]["labels"]["runai-gpu-group"] == "g1"
    assert by_name["e"]["metadata"]["labels"] == {"runai-gpu-group/g2": "g2", "runai-gpu-group/g3": "g3"}
    assert by_name["b"]["status"]["nominatedNodeName"] == "n1"
    pg = by_name["pg"]
    assert pg["metadata"]["annotations"]["kai.scheduler/last-start-timestamp"] == "2026-01-01T00:00:00Z"
    assert pg["status"]["schedulingConditions"][0]["reasons"] == [{"reason": "OverLimit", "message": "x"}]
    final = final_json(after)
    assert final["podGroups"]["ns/pg"] == {"running": 2, "pending": 1, "pipelined": 1}
    assert final["pods"]["ns/b"] == {"node": None, "phase": "Pending", "nominatedNode": "n1"}
    # a recreated pod evicted again keeps a short name
    again = _apply(after, make_plan(2, [Evict(pod="ns/c-r3", pod_uid="x", node="n1", action="preempt", by="ns/o",
                                                message="m")], []), 5, "2026-01-01T00:00:04Z")
    assert any(d["metadata"]["name"] == "c-r5" for d in again)
    cleared = _apply(after, make_plan(3, [ClearCondition(pod_group="ns/pg")], []), 6, "2026-01-01T00:00:05Z")
    assert "schedulingConditions" not in next(d for d in cleared if d["kind"] == "PodGroup")["status"]


def test_loop_writes_podgroups_and_advances_the_clock():
    docs = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
         "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}},
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
         "spec": {"resources": {r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")}}},
        {"apiVersion": "shoal.io/v1alpha1", "kind": "SchedulerConfig", "spec": {"schedulePeriod": "30s"}},
        *[{"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": n, "namespace": "ns", "creationTimestamp": f"2026-01-01T00:00:0{i}Z",
                        "labels": {"kai.scheduler/queue": "q"}},
           "spec": {"schedulerName": "kai-scheduler",
                    "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}} for i, n in enumerate(("p1", "p2"))],
    ]
    result = simulate(docs, cycles=2, now="2026-03-01T10:00:00Z")
    assert not result.problems
    groups = [d for d in result.documents if d.get("kind") == "PodGroup"]
    assert len(groups) == 2  # the podgrouper's groups were written back
    started = [g for g in groups if "kai.scheduler/last-start-timestamp" in (g["metadata"].get("annotations") or {})]
    assert [g["metadata"]["annotations"]["kai.scheduler/last-start-timestamp"] for g in started] == ["2026-03-01T10:00:00Z"]
    pods = {d["metadata"]["name"]: d for d in result.documents if d.get("kind") == "Pod"}
    assert pods["p1"]["spec"]["nodeName"] == "n1" and pods["p1"]["metadata"]["annotations"]["pod-group-name"]
    assert result.last.snapshot.now == "2026-03-01T10:00:30Z"
    assert [len(c.plan.ops) > 0 for c in result.cycles] == [True, True]


def test_units():
    assert (gpus(1500), gpus(2000), gpus(-1), gpus(0)) == (1.5, 2, -1, 0)


def test_default_now_is_the_latest_creation_time():
    from shoal.cli.simulation import DEFAULT_NOW, default_now

    assert default_now([]) == DEFAULT_NOW
    docs = [{"metadata": {"creationTimestamp": "2027-05-01T10:00:00+02:00"}}, {"metadata": {"creationTimestamp": "2027-04-01T00:00:00Z"}},
            {"metadata": {"creationTimestamp": "garbage"}}, "not a doc"]
    assert default_now(docs) == "2027-05-01T08:00:00Z"


def test_pipeline_lasts_until_the_next_plan():
    docs = [group(), pod("b")]
    after = _apply(docs, make_plan(1, [Pipeline(pod="ns/b", pod_uid="u-b", node="n1")], []), 1, "2026-01-01T00:00:00Z")
    assert after[1]["status"]["nominatedNodeName"] == "n1"
    again = _apply(after, make_plan(2, [Pipeline(pod="ns/b", pod_uid="u-b", node="n1")], []), 2, "2026-01-01T00:00:01Z")
    assert again[1]["status"]["nominatedNodeName"] == "n1"
    dropped = _apply(again, make_plan(3, [], []), 3, "2026-01-01T00:00:02Z")
    assert "nominatedNodeName" not in dropped[1]["status"]


def test_objects_without_creation_time_get_the_start_time():
    docs = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
             "spec": {"schedulerName": "kai-scheduler", "containers": [{}]}}]
    result = simulate(docs, cycles=2, now="2026-05-05T05:05:05Z")
    stamps = {d["kind"]: d["metadata"]["creationTimestamp"] for d in result.documents}
    assert stamps == {"Pod": "2026-05-05T05:05:05Z", "PodGroup": "2026-05-05T05:05:05Z"}
    assert docs[0]["metadata"] == {"name": "p", "namespace": "ns"}  # the caller's documents are not touched

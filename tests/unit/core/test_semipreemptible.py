"""Semi-preemptible workloads (KAI v0.18): the gang's minimum is a protected core, the rest is surplus."""

from __future__ import annotations

import msgspec
from builders import NS, cluster, job, node, queue

from shoal.core.cycle import run_cycle
from shoal.core.ingest.podgroups import podgroup_from
from shoal.core.model import SubGroup
from shoal.core.plan import Evict, SetCorePods
from shoal.core.semipreemptible import core_pod_names, core_tasks, places_core
from shoal.core.session import Session

SEMI = "semi-preemptible"


def test_core_is_the_first_min_member_pods_in_task_order_and_counts_as_non_preemptible():
    snap = cluster(nodes=[node("n1")], queues=[queue("q", gpu=(4, -1))],
                   jobs=[job("e", pods=5, gpus=1, min_member=3, running_on=["n1"] * 5, preemptibility=SEMI)])
    session = Session(snap)
    e = session.jobs[f"{NS}/e"]
    assert e.preemptible and e.semi and not places_core(e)
    assert core_pod_names(e) == ("e-0", "e-1", "e-2")
    plan = run_cycle(snap)
    figures = {q.name: q.gpu for q in plan.queues}
    assert figures["q"].allocated == 5000 and figures["q"].allocated_non_preemptible == 3000
    assert plan.of(SetCorePods) == [SetCorePods(pod_group=f"{NS}/e", pods=("e-0", "e-1", "e-2"))]


def test_core_pods_are_published_only_when_they_change():
    spec = job("e", pods=3, gpus=1, min_member=2, running_on=["n1"] * 3, preemptibility=SEMI)
    spec.group = msgspec.structs.replace(spec.group, core_pods=("e-0", "e-1"))
    plan = run_cycle(cluster(nodes=[node("n1")], queues=[queue("q", gpu=(4, -1))], jobs=[spec]))
    assert plan.of(SetCorePods) == []


def test_surplus_is_reclaimed_newest_first_and_the_core_never():
    snap = cluster(nodes=[node("n1", gpus=8)], queues=[queue("a", gpu=(2, -1)), queue("b", gpu=(6, -1))],
                   jobs=[job("e", queue="a", pods=5, gpus=1, min_member=3, running_on=["n1"] * 5,
                             preemptibility=SEMI),
                         job("b", queue="b", pods=6, gpus=1, min_member=6, created=10)])
    plan = run_cycle(snap)
    assert plan.of(Evict) == []  # 3 free + 2 surplus < 6: the core (over quota 2) is not taken
    snap = cluster(nodes=[node("n1", gpus=8)], queues=[queue("a", gpu=(2, -1)), queue("b", gpu=(6, -1))],
                   jobs=[job("e", queue="a", pods=5, gpus=1, min_member=3, running_on=["n1"] * 5,
                             preemptibility=SEMI),
                         job("b", queue="b", pods=5, gpus=1, min_member=5, created=10)])
    assert sorted(op.pod for op in run_cycle(snap).of(Evict)) == [f"{NS}/e-3", f"{NS}/e-4"]


def test_a_preemptible_group_in_the_same_place_loses_its_whole_gang():
    """The contrast: without semi-preemptible the same group is reclaimed whole (its gang goes)."""
    snap = cluster(nodes=[node("n1", gpus=8)], queues=[queue("a", gpu=(2, -1)), queue("b", gpu=(6, -1))],
                   jobs=[job("e", queue="a", pods=5, gpus=1, min_member=3, running_on=["n1"] * 5),
                         job("b", queue="b", pods=6, gpus=1, min_member=6, created=10)])
    assert len(run_cycle(snap).of(Evict)) == 5


def test_a_pending_core_must_fit_in_quota_but_surplus_may_go_over():
    snap = cluster(nodes=[node("n1", gpus=8)], queues=[queue("q", gpu=(2, -1))],
                   jobs=[job("e", pods=3, gpus=1, min_member=3, preemptibility=SEMI)])
    plan = run_cycle(snap)
    assert plan.of(Evict) == [] and not [op for op in plan.ops if op.__class__.__name__ == "Bind"]
    reasons = [op.reason for op in plan.ops if op.__class__.__name__ == "SetCondition"]
    assert reasons == ["NonPreemptibleOverQuota"]
    snap = cluster(nodes=[node("n1", gpus=8)], queues=[queue("q", gpu=(2, -1))],
                   jobs=[job("e", pods=6, gpus=1, min_member=2, preemptibility=SEMI)])
    plan = run_cycle(snap)
    assert len([op for op in plan.ops if op.__class__.__name__ == "Bind"]) == 6
    assert {q.name: q.gpu.allocated_non_preemptible for q in plan.queues}["q"] == 2000


def test_subgroup_core_is_satisfied_first_then_by_name():
    subgroups = tuple(SubGroup(name=f"r{i}", min_member=2) for i in range(3))
    pods = [dict(name=f"e-{r}-{i}", gpus=1, cpu=0, memory=0, node_name="n1" if (r, i) != (0, 1) else None,
                 fraction=None, gpu_memory=None, devices=1, subgroup=f"r{r}") for r in range(3) for i in range(2)]
    snap = cluster(nodes=[node("n1")], queues=[queue("q", gpu=(8, -1))],
                   jobs=[job("e", pods=pods, min_member=0, min_subgroup=2, subgroups=subgroups, preemptibility=SEMI)])
    e = Session(snap).jobs[f"{NS}/e"]
    # r0 has one pod of two: the satisfied r1 and r2 hold the core slots
    assert sorted(t.pod.name for t in core_tasks(e)) == ["e-1-0", "e-1-1", "e-2-0", "e-2-1"]


def test_ingest_reads_semi_preemptible_and_published_core_pods():
    pg = podgroup_from({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                        "metadata": {"name": "g", "namespace": "ns", "uid": "u"},
                        "spec": {"minMember": 2, "queue": "q", "preemptibility": SEMI},
                        "status": {"schedulingState": {"corePods": ["b", "a"]}}})
    assert pg.semi_preemptible and pg.core_pods == ("a", "b")


def test_the_podgrouper_copies_the_semi_preemptible_label_into_the_spec():
    from shoal.core.ingest.grouping import OwnerIndex, group_pod

    job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {},
           "metadata": {"name": "j", "namespace": "ns", "uid": "uid-j", "labels": {"kai.scheduler/preemptibility": SEMI},
                        "annotations": {"kai.scheduler/batch-min-member": "2"}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {},
           "metadata": {"name": "j-0", "namespace": "ns", "uid": "uid-j-0", "labels": {}, "annotations": {},
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "uid-j",
                                             "controller": True}]}}
    g = group_pod(pod, OwnerIndex([job]), ("train", "build", "inference"))
    assert g.podgroup["spec"]["preemptibility"] == SEMI and g.podgroup["spec"]["minMember"] == 2


def test_core_pods_of_a_group_without_live_pods_are_cleared():
    spec = job("e", pods=0, min_member=2, preemptibility=SEMI)
    spec.group = msgspec.structs.replace(spec.group, core_pods=("e-0", "e-1"))
    plan = run_cycle(cluster(nodes=[node("n1")], queues=[queue("q", gpu=(4, -1))], jobs=[spec]))
    assert plan.of(SetCorePods) == [SetCorePods(pod_group=f"{NS}/e", pods=())]


def test_cores_are_counted_once_per_session():
    from shoal.core.context import Context

    snap = cluster(nodes=[node("n1")], queues=[queue("q", gpu=(4, -1))],
                   jobs=[job("e", pods=3, gpus=1, min_member=2, running_on=["n1"] * 3, preemptibility=SEMI)])
    session = Session(snap)
    Context(session)
    assert Context(session).shares["q"].allocated_non_preemptible.gpu_milli == 2000

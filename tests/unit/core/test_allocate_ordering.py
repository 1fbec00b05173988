"""Queue, job, task and subgroup order as seen through allocate (reference §4.1)."""

from __future__ import annotations

from builders import NS, cluster, job, node, pod, queue, schedule

from shoal.core.model import LABEL_KUBEFLOW_ROLE, LABEL_RAY_NODE_TYPE, SubGroup
from shoal.core.ordering import task_order_key
from shoal.core.session import Session


def test_higher_priority_job_gets_the_last_gpu():
    low = job("low", gpus=1, priority_class="train", created=0)
    high = job("high", gpus=1, priority_class="build", created=5)
    snap = cluster(nodes=[node("n1", gpus=1)], queues=[queue("q")], jobs=[low, high])
    assert schedule(snap).bound() == {"high-0": "n1"}


def test_older_job_first_at_equal_priority():
    a = job("a", gpus=1, created=9)
    b = job("b", gpus=1, created=1)
    snap = cluster(nodes=[node("n1", gpus=1)], queues=[queue("q")], jobs=[a, b])
    assert schedule(snap).bound() == {"b-0": "n1"}


def test_queue_within_deserved_goes_first():
    # q1 already holds its quota; q2 has quota left: q2's job wins the last GPU although q1's is older
    busy = job("busy", queue="q1", pods=2, gpus=1, running_on=["n1", "n1"])
    q1_job = job("q1job", queue="q1", gpus=1, created=0)
    q2_job = job("q2job", queue="q2", gpus=1, created=50)
    snap = cluster(
        nodes=[node("n1", gpus=3)],
        queues=[queue("q1", gpu=(2, -1)), queue("q2", gpu=(2, -1))],
        jobs=[busy, q1_job, q2_job],
    )
    assert schedule(snap).bound() == {"q2job-0": "n1"}


def test_queue_priority_breaks_the_tie():
    lo = job("lo", queue="lo", gpus=1, created=0)
    hi = job("hi", queue="hi", gpus=1, created=9)
    snap = cluster(
        nodes=[node("n1", gpus=1)],
        queues=[queue("lo", gpu=(0, -1)), queue("hi", gpu=(0, -1), priority=200)],
        jobs=[lo, hi],
    )
    assert schedule(snap).bound() == {"hi-0": "n1"}


def test_elastic_jobs_interleave_between_queues():
    a = job("a", queue="qa", pods=4, gpus=1, created=0)
    b = job("b", queue="qb", pods=4, gpus=1, created=1)
    snap = cluster(
        nodes=[node("n1", gpus=4)], queues=[queue("qa", gpu=(0, -1)), queue("qb", gpu=(0, -1))], jobs=[a, b]
    )
    bound = schedule(snap).bound()
    assert sum(k.startswith("a-") for k in bound) == 2 and sum(k.startswith("b-") for k in bound) == 2


def test_task_order_leaders_then_task_priority_then_creation():
    pods = [
        pod("w0", gpus=1, created=0),
        pod("w1", gpus=1, created=1, task_priority=5),
        pod("w2", gpus=1, created=2, task_priority=9),
        pod("master", gpus=1, created=3, labels={LABEL_KUBEFLOW_ROLE: "master"}),
        pod("head", gpus=1, created=4, labels={LABEL_RAY_NODE_TYPE: "head"}),
    ]
    s = Session(cluster(nodes=[node("n1")], queues=[queue("q")], jobs=[job("j", pods=pods)]))
    tasks = sorted(s.jobs[f"{NS}/j"].tasks, key=task_order_key)
    assert [t.pod.name for t in tasks] == ["master", "head", "w2", "w1", "w0"]
    # with one free GPU the leader is placed first
    r = schedule(cluster(nodes=[node("n1", gpus=1)], queues=[queue("q")], jobs=[job("j", pods=pods)]))
    assert r.bound() == {"master": "n1"}


def test_nested_subgroups_with_min_subgroup():
    sgs = (
        SubGroup(name="mid"),
        SubGroup(name="x", parent="mid", min_member=1),
        SubGroup(name="y", parent="mid", min_member=2),
        SubGroup(name="z", min_member=1),
    )
    pods = [
        pod("x0", gpus=1, subgroup="x"),
        pod("y0", gpus=1, subgroup="y"),
        pod("y1", gpus=1, subgroup="y"),
        pod("z0", gpus=1, subgroup="z"),
    ]
    snap = cluster(nodes=[node("n1", gpus=3)], queues=[queue("q")], jobs=[job("j", pods=pods, subgroups=sgs)])
    r = schedule(snap)
    # root needs both mid (x and y: 3 pods) and z (1 pod): 4 pods on 3 GPUs -> nothing
    assert r.bound() == {}
    assert "while sub-group y requires 2 pods for gang scheduling" in r.condition("j").message
    snap4 = cluster(
        nodes=[node("n1", gpus=4)], queues=[queue("q")], jobs=[job("j", pods=pods, subgroups=sgs)]
    )
    assert len(schedule(snap4).bound()) == 4


def test_gated_pods_make_a_gang_not_ready():
    pods = [pod("a", gpus=1), pod("b", gpus=1, gated=True)]
    r = schedule(cluster(nodes=[node("n1")], queues=[queue("q")], jobs=[job("j", pods=pods, min_member=2)]))
    assert r.bound() == {}
    (ev,) = r.pg_events("j")
    assert ev.message == ("Job is not ready for scheduling. Waiting for 2 pods, currently 2 exist, 1 are gated. "
                          "Gated pods wait until their scheduling gates are removed")

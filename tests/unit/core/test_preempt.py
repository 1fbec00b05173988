"""Priority preemption inside one queue (reference §4.5; S23–S27, seed 000 observation b)."""

from __future__ import annotations

from builders import NS, cluster, job, node, queue, schedule

from shoal.core.model import ANNOTATION_LAST_EVICTION
from shoal.core.plan import Annotate, Evict

NOW = 1_000_000


def evicted(r) -> list[str]:
    return sorted(e.pod.split("/", 1)[1] for e in r.plan.of(Evict))


def trains(count: int = 4, **kw) -> list:
    return [job(f"train{i}", queue="q", pods=1, gpus=1, running_on=["n1"], created=i, **kw) for i in range(count)]


def s23(preemptor_class: str = "build", q_gpu=(1, -1), victims=None, **preemptor_kw):
    return cluster(
        nodes=[node("n1", gpus=4)],
        queues=[queue("q", gpu=q_gpu)],
        jobs=(victims if victims is not None else trains())
        + [job("newcomer", queue="q", pods=1, gpus=1, priority_class=preemptor_class, created=100, **preemptor_kw)],
        now=NOW,
    )


def test_s23_build_pod_preempts_the_newest_train_pod():
    """Seed 000 (b): a build pod arrives in a queue full of train pods; one train pod is evicted."""
    r = schedule(s23())
    (ev,) = r.plan.of(Evict)
    assert ev.pod == f"{NS}/train3-0"
    assert ev.action == "preempt" and ev.by == f"{NS}/newcomer"
    assert ev.message == f"Pod {NS}/train3-0 was preempted by higher priority workload {NS}/newcomer"
    assert r.pipelined() == {"newcomer-0": "n1"}
    assert (f"{NS}/newcomer", ANNOTATION_LAST_EVICTION) in {(a.pod_group, a.key) for a in r.plan.of(Annotate)}


def test_build_preemptible_displaces_train():
    r = schedule(s23("build-preemptible"))
    assert evicted(r) == ["train3-0"]


def test_s24_no_preemption_between_equal_priorities():
    r = schedule(s23("train"))
    assert evicted(r) == [] and r.pipelined() == {}


def test_s24_no_preemption_across_queues():
    snap = cluster(
        nodes=[node("n1", gpus=4)],
        queues=[queue("q", gpu=(4, -1)), queue("other", gpu=(1, -1))],
        jobs=trains() + [job("newcomer", queue="other", pods=1, gpus=1, priority_class="build", created=100)],
    )
    r = schedule(snap)
    assert evicted(r) == []  # q is within its quota: nothing to reclaim either


def test_s25_non_preemptible_victims_are_protected():
    victims = [job(f"b{i}", queue="q", pods=1, gpus=1, priority_class="build", running_on=["n1"], created=i)
               for i in range(4)]
    r = schedule(s23("inference", q_gpu=(5, -1), victims=victims))
    assert evicted(r) == []


def test_non_preemptible_preemptor_must_fit_its_quota_first():
    r = schedule(s23("build", q_gpu=(0, -1)))
    assert evicted(r) == []


def test_preemption_never_pushes_a_queue_over_its_limit():
    # q has limit 4 and runs 4 train pods; the build job needs 2 GPUs: it must evict 2, not 1
    snap = cluster(
        nodes=[node("n1", gpus=4), node("n2", gpus=1)],
        queues=[queue("q", gpu=(2, 4))],
        jobs=trains() + [job("newcomer", queue="q", pods=1, gpus=2, priority_class="build", created=100)],
    )
    r = schedule(snap)
    assert evicted(r) == ["train2-0", "train3-0"]


def test_s26_preempt_min_runtime():
    started = "1970-01-12T13:44:40Z"  # now - 120 s
    victims = trains(last_start_timestamp=started)
    q = queue("q", gpu=(1, -1))
    snap = s23(victims=victims)
    protected_q = q.__class__(**{**{f: getattr(q, f) for f in q.__struct_fields__}, "preempt_min_runtime_s": 300})
    queues = tuple(protected_q if x.name == "q" else x for x in snap.queues)
    fields = {f: getattr(snap, f) for f in snap.__struct_fields__}
    assert evicted(schedule(snap.__class__(**{**fields, "queues": queues}))) == []
    assert evicted(schedule(snap.__class__(**{**fields, "queues": queues, "now": NOW + 180}))) == ["train3-0"]


def _at(snap, now):
    return snap.__class__(**{**{f: getattr(snap, f) for f in snap.__struct_fields__}, "now": now})


def test_s27_preemption_delay_holds_evictions_and_says_until_when():
    r = schedule(_at(s23(preemption_delay_s=120), 150))  # the PodGroup was created at 100
    assert evicted(r) == []
    cond = r.condition("newcomer")
    assert cond is not None and cond.reason == "PreemptionDelayNotElapsed"
    assert cond.message == (
        "PreemptionDelayNotElapsed: Workload is within its preemption delay window (2m0s) and may not trigger "
        "evictions before 1970-01-01T00:03:40Z."
    )


def test_s27_after_the_delay_the_preemption_happens():
    snap = s23(preemption_delay_s=120)
    fields = {f: getattr(snap, f) for f in snap.__struct_fields__}
    r = schedule(snap.__class__(**{**fields, "now": 100 + 120}))
    assert evicted(r) == ["train3-0"]


def test_s27_a_free_gpu_during_the_delay_is_simply_allocated():
    r = schedule(_at(s23(preemption_delay_s=120, victims=trains(3)), 150))
    assert evicted(r) == [] and r.bound() == {"newcomer-0": "n1"}
    assert r.condition("newcomer") is None


def test_elastic_victim_loses_only_pods_above_its_minimum_first():
    victims = [job("elastic", queue="q", pods=4, gpus=1, min_member=2, running_on=["n1"] * 4)]
    r = schedule(s23(victims=victims))
    assert evicted(r) == ["elastic-3"]


def test_gang_victim_is_evicted_whole():
    victims = [job("gang", queue="q", pods=4, gpus=1, min_member=4, running_on=["n1"] * 4)]
    r = schedule(s23(victims=victims))
    assert evicted(r) == ["gang-0", "gang-1", "gang-2", "gang-3"]


def test_queue_depth_per_action_caps_the_jobs_searched():
    from shoal.core.model import ShardConfig

    snap = s23()
    fields = {f: getattr(snap, f) for f in snap.__struct_fields__}
    capped = snap.__class__(**{**fields, "config": ShardConfig(queue_depth_per_action={"preempt": 0})})
    assert evicted(schedule(capped)) == []
    one = snap.__class__(**{**fields, "config": ShardConfig(queue_depth_per_action={"preempt": 1})})
    assert evicted(schedule(one)) == ["train3-0"]


def test_a_queue_at_its_gpu_limit_preempts_only_on_the_node_it_takes():
    """Issue 10 (4,000 nodes): a 1-GPU job of a queue at its GPU limit used to evict every lower-priority
    CPU-only pod of its queue on every node until the queue's figures dropped, then was bound on idle
    capacity elsewhere. Only a victim that frees the over-limit GPU, on the node the job then takes, goes."""
    cpu_jobs = [job(f"cpu{i}", queue="q", pods=1, cpu=1000, running_on=[f"n{i % 3}"], created=200 + i)
                for i in range(9)]  # the newest: victim order reaches them first
    snap = cluster(
        nodes=[node("n0", gpus=4), node("n1", gpus=4), node("n2", gpus=2)],  # 8 GPUs idle on n0/n1
        queues=[queue("q", gpu=(2, 2))],
        jobs=[job("gpuvictim", queue="q", pods=1, gpus=2, running_on=["n2"], created=10)] + cpu_jobs
        + [job("newcomer", queue="q", pods=1, gpus=1, priority_class="build", created=300)],
        now=NOW,
    )
    r = schedule(snap)
    assert evicted(r) == ["gpuvictim-0"]
    assert r.pipelined() == {"newcomer-0": "n2"} and r.bound() == {}


def test_a_single_victim_beats_a_gang_that_mostly_runs_elsewhere():
    """The newest victim is a 2-node gang (it must go whole); the search runs again without it and keeps
    the cheaper scenario: one older pod on the node the newcomer takes."""
    snap = cluster(
        nodes=[node("n0", gpus=2), node("n1", gpus=2)],
        queues=[queue("q", gpu=(4, -1))],
        jobs=[job("single", queue="q", pods=1, gpus=1, running_on=["n0"], created=1),
              job("keeper", queue="q", pods=1, gpus=1, priority_class="build", running_on=["n1"], created=2),
              job("gang", queue="q", pods=2, gpus=1, min_member=2, running_on=["n0", "n1"], created=3),
              job("newcomer", queue="q", pods=1, gpus=1, priority_class="build", created=100)],
        now=NOW,
    )
    r = schedule(snap)
    assert evicted(r) == ["single-0"]
    assert r.pipelined() == {"newcomer-0": "n0"}


def test_a_job_takes_what_an_earlier_preemption_freed_without_a_victim_of_its_own():
    """p1 preempts the 2-GPU train pod and uses 1 GPU; p2 goes on the other released GPU with no eviction
    of its own: the queue's remaining candidate (CPU only, on a CPU node) frees nothing p2 needs, so only
    the try on what the cycle already freed can place it."""
    snap = cluster(
        nodes=[node("n1", gpus=2), node("n2", gpus=0)],
        queues=[queue("q", gpu=(2, -1))],
        jobs=[job("other", queue="q", pods=1, cpu=1000, running_on=["n2"], created=0),
              job("big", queue="q", pods=1, gpus=2, running_on=["n1"], created=1),
              job("p1", queue="q", pods=1, gpus=1, priority_class="build", created=100),
              job("p2", queue="q", pods=1, gpus=1, priority_class="build", created=101)],
        now=NOW,
    )
    r = schedule(snap)
    assert [(e.pod, e.by) for e in r.plan.of(Evict)] == [(f"{NS}/big-0", f"{NS}/p1")]
    assert r.pipelined() == {"p1-0": "n1", "p2-0": "n1"}


def test_a_queue_over_its_limit_never_keeps_a_victim_off_the_preemptors_node_once_the_gang_core_stays():
    """Found by the needed-victims property: pruning took the gang's core out of the scenario, and the
    above-minimum pod kept only as its gang-mate (on the other node) stayed a victim nothing needed."""
    from shoal.core.audit import unneeded_evictions

    gang = job("big", queue="p", pods=5, gpus=2, cpu=500, min_member=3, running_on=["n0"] * 4 + ["n1"])
    fillers = [job(f"cpu{i}", queue="p", cpu=500, running_on=["n0"]) for i in range(4)]
    snap = cluster(
        nodes=[node("n0", gpus=8, pods=8, cpu=16_000), node("n1", gpus=4, pods=8, cpu=16_000)],
        queues=[queue("d", gpu=(0, 7)), queue("p", parent="d")],
        jobs=[gang, *fillers, job("urgent", queue="p", gpus=1, cpu=500, priority_class="build-preemptible",
                                  created=9)],
    )
    plan = schedule(snap).plan
    assert unneeded_evictions(snap, plan) == []

"""Reclaim between queues (reference §4.4; scenarios S15, S18–S22, S38) at the core level."""

from __future__ import annotations

from builders import NS, cluster, job, node, queue, schedule

from shoal.core.model import ANNOTATION_LAST_EVICTION, QueueUsage, ShardConfig
from shoal.core.plan import Annotate, Evict

MIN = 60


def evictions(r) -> list[Evict]:
    return r.plan.of(Evict)


def evicted(r) -> list[str]:
    return sorted(e.pod.split("/", 1)[1] for e in evictions(r))


def one_gpu_jobs(prefix: str, queue_name: str, count: int, running_on: str | None = None, created0: int = 0,
                 priority_class: str = "train", **kw) -> list:
    return [
        job(f"{prefix}{i}", queue=queue_name, pods=1, gpus=1, priority_class=priority_class,
            running_on=[running_on] if running_on else None, created=created0 + i, **kw)
        for i in range(count)
    ]


def s18(a_running: int = 8, b_pending: int = 2, **a_kw):
    return cluster(
        nodes=[node("n1", gpus=8)],
        queues=[queue("a", gpu=(4, -1), **a_kw), queue("b", gpu=(4, -1))],
        jobs=one_gpu_jobs("a", "a", a_running, running_on="n1") + one_gpu_jobs("b", "b", b_pending, created0=100),
    )


def test_s18_over_quota_work_is_reclaimed_newest_first_and_reclaimer_pipelined():
    r = schedule(s18())
    assert evicted(r) == ["a6-0", "a7-0"]  # newest first
    assert sorted(r.pipelined()) == ["b0-0", "b1-0"]
    assert r.bound() == {}
    by = {e.pod: e.by for e in evictions(r)}
    assert set(by.values()) <= {f"{NS}/b0", f"{NS}/b1"}
    assert all(e.action == "reclaim" for e in evictions(r))


def test_s18_message_has_the_two_queue_lines_at_the_divergence_level():
    r = schedule(s18())
    first = next(e for e in evictions(r) if e.by == f"{NS}/b0")
    assert first.message == (
        f"Pod {first.pod} was preempted by workload {NS}/b0.\n"
        "a uses 8 GPUs with a quota of 4 GPUs, fair-share of 6 GPUs and queue priority of 100.\n"
        "b uses 0 GPUs with a quota of 4 GPUs, fair-share of 2 GPUs and queue priority of 100."
    )


def test_reclaimer_gets_last_eviction_timestamp():
    r = schedule(s18())
    stamps = {(a.pod_group, a.key) for a in r.plan.of(Annotate)}
    assert (f"{NS}/b0", ANNOTATION_LAST_EVICTION) in stamps


def test_s19_in_quota_work_is_protected():
    snap = cluster(
        nodes=[node("n1", gpus=8)],
        queues=[queue("a", gpu=(4, -1)), queue("b", gpu=(4, -1))],
        jobs=one_gpu_jobs("a", "a", 4, running_on="n1") + one_gpu_jobs("b", "b", 4, running_on="n1")
        + one_gpu_jobs("c", "b", 2, created0=100),
    )
    r = schedule(snap)
    assert evictions(r) == []
    assert r.pipelined() == {} and r.bound() == {}


def test_s20_only_preemptible_over_quota_pods_are_reclaimed():
    snap = cluster(
        nodes=[node("n1", gpus=4)],
        queues=[queue("a", gpu=(2, -1)), queue("b", gpu=(2, -1))],
        jobs=one_gpu_jobs("build", "a", 2, running_on="n1", priority_class="build")
        + one_gpu_jobs("train", "a", 2, running_on="n1", created0=10)
        + one_gpu_jobs("b", "b", 2, created0=100),
    )
    r = schedule(snap)
    assert evicted(r) == ["train0-0", "train1-0"]
    assert sorted(r.pipelined()) == ["b0-0", "b1-0"]


def test_s15_higher_priority_queue_reclaims_everything():
    snap = cluster(
        nodes=[node("n1", gpus=4)],
        queues=[queue("a", gpu=(0, -1, 1), priority=200), queue("b", gpu=(0, -1, 100))],
        jobs=one_gpu_jobs("b", "b", 4, running_on="n1") + one_gpu_jobs("a", "a", 4, created0=100),
    )
    r = schedule(snap)
    assert evicted(r) == ["b0-0", "b1-0", "b2-0", "b3-0"]
    assert sorted(r.pipelined()) == ["a0-0", "a1-0", "a2-0", "a3-0"]
    msg = evictions(r)[0].message
    assert msg.startswith(f"Pod {evictions(r)[0].pod} was preempted by workload {NS}/a")
    assert "\nb uses 4 GPUs with a quota of 0 GPUs, fair-share of 0 GPUs and queue priority of 100." in msg
    assert "\na uses 0 GPUs with a quota of 0 GPUs, fair-share of 4 GPUs and queue priority of 200." in msg


def _s22(p1_running: int, p2_pending: int, p3_pending: int):
    queues = [
        queue("d1", gpu=(4, -1)), queue("d2", gpu=(4, -1)),
        queue("p1", parent="d1", gpu=(2, -1)), queue("p2", parent="d1", gpu=(2, -1)),
        queue("p3", parent="d2", gpu=(4, -1)),
    ]
    jobs = (one_gpu_jobs("p1-", "p1", p1_running, running_on="n1") + one_gpu_jobs("p2-", "p2", p2_pending, created0=100)
            + one_gpu_jobs("p3-", "p3", p3_pending, created0=200))
    return cluster(nodes=[node("n1", gpus=8)], queues=queues, jobs=jobs)


def test_s22_department_level_reclaim_names_the_departments():
    r = schedule(_s22(8, 0, 4))
    assert evicted(r) == ["p1-4-0", "p1-5-0", "p1-6-0", "p1-7-0"]
    lines = evictions(r)[0].message.split("\n")
    assert lines[1].startswith("d1 uses 8 GPUs with a quota of 4 GPUs")
    assert lines[2].startswith("d2 uses 0 GPUs with a quota of 4 GPUs")


def test_s22_project_level_reclaim_names_the_projects():
    # after the first reclaim: p1 runs 4, p3 runs 4; p2 submits 2
    queues = [
        queue("d1", gpu=(4, -1)), queue("d2", gpu=(4, -1)),
        queue("p1", parent="d1", gpu=(2, -1)), queue("p2", parent="d1", gpu=(2, -1)),
        queue("p3", parent="d2", gpu=(4, -1)),
    ]
    jobs = (one_gpu_jobs("p1-", "p1", 4, running_on="n1") + one_gpu_jobs("p3-", "p3", 4, running_on="n1", created0=50)
            + one_gpu_jobs("p2-", "p2", 2, created0=100))
    r = schedule(cluster(nodes=[node("n1", gpus=8)], queues=queues, jobs=jobs))
    assert evicted(r) == ["p1-2-0", "p1-3-0"]
    lines = evictions(r)[0].message.split("\n")
    assert lines[1].startswith("p1 uses 4 GPUs with a quota of 2 GPUs")
    assert lines[2].startswith("p2 uses 0 GPUs with a quota of 2 GPUs")


def test_s21_reclaim_min_runtime_protects_recently_started_jobs():
    now = 1_000_000
    started = "1970-01-12T13:44:40Z"  # now - 120 s
    snap = cluster(
        nodes=[node("n1", gpus=8)],
        queues=[queue("a", gpu=(4, -1)), queue("b", gpu=(4, -1))],
        jobs=[job(f"a{i}", queue="a", pods=1, gpus=1, running_on=["n1"], created=i, last_start_timestamp=started)
              for i in range(8)] + one_gpu_jobs("b", "b", 2, created0=100),
        now=now,
    )
    protected = snap.__class__(**{**{f: getattr(snap, f) for f in snap.__struct_fields__},
                                  "queues": tuple(q if q.name != "a" else q.__class__(**{
                                      **{f: getattr(q, f) for f in q.__struct_fields__}, "reclaim_min_runtime_s": 600})
                                      for q in snap.queues)})
    assert evictions(schedule(protected)) == []
    later = protected.__class__(**{**{f: getattr(protected, f) for f in protected.__struct_fields__},
                                   "now": now + 600})
    assert evicted(schedule(later)) == ["a6-0", "a7-0"]
    assert evicted(schedule(snap)) == ["a6-0", "a7-0"]  # no min-runtime: reclaimed at once


def test_s38_time_based_fair_share_reclaims_up_to_the_usage_weighted_share():
    def snap(usage, k=1.0):
        return cluster(
            nodes=[node("n1", gpus=8), node("n2", gpus=8)],
            queues=[queue("a", gpu=(0, -1)), queue("b", gpu=(0, -1))],
            jobs=one_gpu_jobs("a", "a", 8, running_on="n1") + one_gpu_jobs("x", "a", 8, running_on="n2", created0=8)
            + one_gpu_jobs("b", "b", 16, created0=100),
            config=ShardConfig(usage=usage, k_value=k),
        )
    r = schedule(snap((QueueUsage(queue="a", gpu=0.5),)))
    assert r.queue("a").gpu.fair_share == 5000 and r.queue("b").gpu.fair_share == 11000
    assert len(evictions(r)) == 11
    assert len(r.pipelined()) == 11
    even = schedule(snap(()))
    assert even.queue("a").gpu.fair_share == 8000
    assert len(evictions(even)) == 8
    k0 = schedule(snap((QueueUsage(queue="a", gpu=0.5),), k=0.0))
    assert len(evictions(k0)) == 8


def test_reclaim_reaches_fair_share_beyond_deserved():
    # b's quota is 1 but its fair share is 4 (weights equal, 8 GPUs): reclaim goes up to 4, not to 1
    snap = cluster(
        nodes=[node("n1", gpus=8)],
        queues=[queue("a", gpu=(1, -1)), queue("b", gpu=(1, -1))],
        jobs=one_gpu_jobs("a", "a", 8, running_on="n1") + one_gpu_jobs("b", "b", 6, created0=100),
    )
    r = schedule(snap)
    assert r.queue("b").gpu.fair_share == 4000
    assert len(evictions(r)) == 4  # beyond its quota of 1, up to its fair share of 4, and no further
    assert len(r.pipelined()) == 4
    assert sorted(r.pipelined()) == ["b0-0", "b1-0", "b2-0", "b3-0"]


def test_victim_budget_stops_the_search_and_says_so():
    snap = cluster(
        nodes=[node("n1", gpus=8)],
        queues=[queue("a", gpu=(0, -1)), queue("b", gpu=(4, -1))],
        jobs=one_gpu_jobs("a", "a", 8, running_on="n1") + [job("big", queue="b", pods=4, gpus=1, min_member=4,
                                                                 created=100)],
        config=ShardConfig(victim_budget=2),
    )
    from shoal.core.cycle import run_cycle_timed

    plan, timings = run_cycle_timed(snap)
    assert plan.of(Evict) == []
    cond = [c for c in plan.ops if getattr(c, "pod_group", "") == f"{NS}/big" and type(c).__name__ == "SetCondition"]
    assert cond and cond[0].reason == "VictimSearchBudgetExhausted"
    assert "victim budget" in cond[0].message
    assert timings.counters["reclaim.budget_exhausted"] == 1
    assert timings.counters["reclaim.victims_simulated"] == 2


def test_a_job_that_spends_its_own_budget_is_reported_and_the_next_job_is_still_tried():
    snap = cluster(
        nodes=[node("n1", gpus=8)],
        queues=[queue("a", gpu=(0, -1)), queue("b", gpu=(4, -1))],
        jobs=one_gpu_jobs("a", "a", 8, running_on="n1")
        + [job("big", queue="b", pods=4, gpus=1, min_member=4, created=100),
           job("small", queue="b", pods=1, gpus=1, created=200)],
        config=ShardConfig(victim_budget_per_job=2),
    )
    from shoal.core.cycle import run_cycle_timed

    plan, timings = run_cycle_timed(snap)
    cond = {c.pod_group: c for c in plan.ops if type(c).__name__ == "SetCondition"}
    assert cond[f"{NS}/big"].reason == "VictimSearchBudgetExhausted"
    assert "victim budget per job" in cond[f"{NS}/big"].message
    assert "simulating 2 victims" in cond[f"{NS}/big"].message
    assert [e.by for e in plan.of(Evict)] == [f"{NS}/small"]  # one victim, for the job that fits
    assert timings.counters["reclaim.job_budget_exhausted"] == 1
    assert "reclaim.budget_exhausted" not in timings.counters


def test_reclaim_benchmark_cluster_reclaims_for_every_pending_pod():
    from shoal.cli.bench_reclaim import bench_one

    row = bench_one(20, 1, 7, 24)
    assert row["pending"] >= 24
    assert row["evictions"] > 0
    assert row["pipelined"] == row["pending"]  # the starved queue gets its share back: every pending pod is placed
    assert row["counters"]["reclaim.victims_simulated"] >= row["evictions"]


def test_queue_figures_count_a_gang_converted_to_pipelined_once():
    from builders import pod

    pods = [pod("g-0", gpus=1), pod("g-1", gpus=1)]
    old = job("old", queue="q", pods=[pod("old-0", gpus=1, node_name="n1", deleting=True)])
    snap = cluster(nodes=[node("n1", gpus=2)], queues=[queue("q")],
                   jobs=[job("g", queue="q", pods=pods, min_member=2), old])
    r = schedule(snap)
    assert r.pipelined() == {"g-0": "n1", "g-1": "n1"}
    assert r.queue("q").gpu.allocated == 2000  # reclaim/preempt read these figures: no double counting


def _shares(queues, jobs=()):
    from shoal.core.context import Context
    from shoal.core.session import Session

    ctx = Context(Session(cluster(nodes=[node("n1", gpus=8)], queues=queues, jobs=list(jobs))))
    return ctx.shares


def test_leveled_queues_meet_at_the_divergence_point():
    from shoal.core.reclaimable import leveled

    shares = _shares([queue("d1"), queue("d2"), queue("p1", parent="d1"), queue("p2", parent="d1"),
                      queue("p3", parent="d2")])
    assert leveled(shares, "p3", "p1") == ("d2", "d1")
    assert leveled(shares, "p2", "p1") == ("p2", "p1")
    assert leveled(shares, "p1", "p1") is None


def test_saturation_bound_uses_the_multiplier():
    import msgspec

    from shoal.core.reclaimable import _saturation_ok
    from shoal.core.resources import Resources

    shares = _shares([queue("a", gpu=(4, -1)), queue("b", gpu=(4, -1))])
    r = msgspec.structs.replace(shares["a"], fair_share=Resources(0, 0, 2000))
    v = msgspec.structs.replace(shares["b"], fair_share=Resources(0, 0, 2000))
    gpu_only = (False, False, True)
    # reclaimer ends at 3/2 = 1.5 of its fair share, victim at 4/2 = 2.0
    assert _saturation_ok(r, v, Resources(0, 0, 3000), Resources(0, 0, 4000), gpu_only, 1.0)
    assert not _saturation_ok(r, v, Resources(0, 0, 3000), Resources(0, 0, 4000), gpu_only, 1.5)  # 2.25 >= 2
    # within its fair share the bound never applies
    assert _saturation_ok(r, v, Resources(0, 0, 2000), Resources(0, 0, 1000), gpu_only, 5.0)


def test_queue_line_renders_requested_resources_gpu_first():
    from shoal.core.reclaimable import queue_line
    from shoal.core.resources import Resources

    shares = _shares([queue("a", gpu=(4, -1), display_name="Team A"), queue("b", gpu=(-1, -1))])
    line = queue_line(shares["a"], Resources(1500, 0, 8000), (True, False, True))
    assert line == ("Team A uses 8 GPUs, 1.5 CPU cores with a quota of 4 GPUs, Unlimited CPU cores, fair-share of "
                    f"{shares['a'].fair_share.gpu_milli // 1000} GPUs, 0 CPU cores and queue priority of 100.")
    assert "quota of Unlimited GPUs" in queue_line(shares["b"], Resources(0, 0, 0), (False, False, True))


"""Reference §10 scenarios at the core level: gang, quota/limit, GPU sharing and placement."""

from __future__ import annotations

from builders import NS, cluster, job, node, pod, queue, schedule

from shoal.core.model import ANNOTATION_LAST_START, ShardConfig, SubGroup
from shoal.core.plan import Annotate, Bind, PodGroupEvent, Reserve, SetCondition


def test_s1_gang_cannot_fit_binds_nothing_and_explains():
    snap = cluster(
        nodes=[node("n1", gpus=4)], queues=[queue("q")], jobs=[job("j", pods=3, gpus=2, min_member=3)]
    )
    r = schedule(snap)
    assert r.bound() == {}
    cond = r.condition("j")
    assert cond is not None
    assert cond.reason == "PodSchedulingErrors"
    assert cond.message.startswith(
        "PodSchedulingErrors: Resources were found for 2 pods while 3 are required for gang scheduling. "
        "Additional pods cannot be scheduled due to:"
    )
    assert "didn't have enough resources: GPUs" in cond.message
    assert cond.message == (
        "PodSchedulingErrors: Resources were found for 2 pods while 3 are required for gang scheduling. "
        "Additional pods cannot be scheduled due to: no nodes with enough resources were found: "
        "1 node(s) didn't have enough resources: GPUs."
    )
    assert sorted(e.pod for e in r.plan.of(type(r.pod_events("j-0")[0]))) == [f"{NS}/j-{i}" for i in range(3)]


def test_s1_two_nodes_variant():
    snap = cluster(
        nodes=[node("n1", gpus=2), node("n2", gpus=2)],
        queues=[queue("q")],
        jobs=[job("j", pods=3, gpus=2, min_member=3)],
    )
    r = schedule(snap)
    assert r.bound() == {}
    assert "Resources were found for 2 pods while 3 are required" in r.condition("j").message
    assert "2 node(s) didn't have enough resources: GPUs" in r.condition("j").message


def test_s1_control_without_gang_two_run_third_gets_per_pod_event():
    snap = cluster(
        nodes=[node("n1", gpus=4)], queues=[queue("q")], jobs=[job("j", pods=3, gpus=2, min_member=1)]
    )
    r = schedule(snap)
    assert r.bound() == {"j-0": "n1", "j-1": "n1"}
    assert r.condition("j") is None  # the job has allocated pods: no condition (S4 rule)
    (event,) = r.pod_events("j-2")
    assert event.message.startswith(f"Resources were not found for pod {NS}/j-2 due to: ")


def test_s2_gang_fits_atomically_and_stamps_last_start():
    snap = cluster(
        nodes=[node("n1", gpus=6)], queues=[queue("q")], jobs=[job("j", pods=3, gpus=2, min_member=3)]
    )
    r = schedule(snap)
    assert r.bound() == {"j-0": "n1", "j-1": "n1", "j-2": "n1"}
    (ann,) = r.plan.of(Annotate)
    assert (ann.pod_group, ann.key) == (f"{NS}/j", ANNOTATION_LAST_START)
    assert ann.value == "1970-01-12T13:46:40Z"


def test_s3_not_ready_event_and_no_condition():
    snap = cluster(
        nodes=[node("n1", gpus=8)], queues=[queue("q")], jobs=[job("j", pods=2, gpus=1, min_member=3)]
    )
    r = schedule(snap)
    assert r.bound() == {}
    assert r.condition("j") is None
    (ev,) = r.pg_events("j")
    assert ev.reason == "NotReady"
    assert ev.message == "Job is not ready for scheduling. Waiting for 3 pods, currently 2 exist, 0 are gated"


def test_s4_elastic_growth_fills_free_gpus_without_condition():
    snap = cluster(nodes=[node("n1", gpus=4)], queues=[queue("q")], jobs=[job("j", pods=6, gpus=1)])
    r = schedule(snap)
    assert sorted(r.bound()) == ["j-0", "j-1", "j-2", "j-3"]
    assert r.condition("j") is None
    for name in ("j-4", "j-5"):
        (ev,) = r.pod_events(name)
        assert ev.reason == "Unschedulable"
        assert ev.message.startswith(f"Resources were not found for pod {NS}/{name} due to: ")


def _subgroup_job(min_subgroup):
    pods = [pod(f"a-{i}", gpus=1, subgroup="a") for i in range(2)] + [
        pod(f"b-{i}", gpus=1, subgroup="b") for i in range(3)
    ]
    return job(
        "sg",
        pods=pods,
        min_subgroup=min_subgroup,
        subgroups=(SubGroup(name="a", min_member=2), SubGroup(name="b", min_member=3)),
    )


def test_s6_subgroup_gang_nothing_runs():
    snap = cluster(nodes=[node("n1", gpus=4)], queues=[queue("q")], jobs=[_subgroup_job(2)])
    r = schedule(snap)
    assert r.bound() == {}
    msg = r.condition("sg").message
    assert (
        "Resources were found for 4 pods from all sub-groups while sub-group b requires 3 pods for gang scheduling"
        in msg
    )
    assert "Additional pods cannot be scheduled in this sub-group due to: " in msg


def test_s6_variant_min_subgroup_one_runs_subgroup_a():
    snap = cluster(nodes=[node("n1", gpus=4)], queues=[queue("q")], jobs=[_subgroup_job(1)])
    r = schedule(snap)
    assert r.bound() == {"a-0": "n1", "a-1": "n1"}
    assert r.condition("sg") is None


def _singles(n, **kw):
    return [job(f"j{i}", pods=1, created=i, **kw) for i in range(n)]


def test_s9_over_quota_up_to_limit():
    snap = cluster(nodes=[node("n1", gpus=8)], queues=[queue("q", gpu=(1, 2))], jobs=_singles(3, gpus=1))
    r = schedule(snap)
    assert sorted(r.bound()) == ["j0-0", "j1-0"]
    assert r.condition("j2").message == (
        "OverLimit: q quota has reached the allowable limit of GPUs. Limit is 2 GPUs, currently 2 GPUs "
        "allocated and workload requested 1 GPUs."
    )
    assert r.condition("j2").reasons[0].details.limit[2] == 2000


def test_s9_variant_unlimited_limit_all_run():
    snap = cluster(nodes=[node("n1", gpus=8)], queues=[queue("q", gpu=(1, -1))], jobs=_singles(3, gpus=1))
    assert len(schedule(snap).bound()) == 3


def test_s10_parent_limit_binds_and_is_named():
    snap = cluster(
        nodes=[node("n1", gpus=8)],
        queues=[queue("p", gpu=(-1, 2)), queue("c", parent="p", gpu=(-1, -1))],
        jobs=_singles(3, gpus=1, queue="c"),
    )
    r = schedule(snap)
    assert len(r.bound()) == 2
    assert r.condition("j2").message.startswith(
        "OverLimit: p quota has reached the allowable limit of GPUs. Limit is 2 GPUs, currently 2 GPUs allocated"
    )


def test_s11_non_preemptible_stays_within_quota():
    snap = cluster(
        nodes=[node("n1", gpus=8)],
        queues=[queue("q", gpu=(2, -1))],
        jobs=_singles(3, gpus=1, priority_class="inference"),
    )
    r = schedule(snap)
    assert len(r.bound()) == 2
    assert r.condition("j2").message == (
        "NonPreemptibleOverQuota: Non-preemptible workload is over quota. Workload requested 1 GPUs, but q quota "
        "is 2 GPUs, while 2 GPUs are already allocated for non-preemptible pods. Use a preemptible workload to "
        "go over quota."
    )
    assert r.queue("q").gpu.allocated_non_preemptible == 2000


def test_s12_default_queue_gotcha_cpu_first_and_preemptible_escape():
    qs = [
        queue("default-parent-queue", parent=None, gpu=(0, -1), cpu=(0, -1), memory=(0, -1)),
        queue("default-queue", parent="default-parent-queue", gpu=(0, -1), cpu=(0, -1), memory=(0, -1)),
    ]
    blocked = job("dep", queue="default-queue", cpu=100, priority_class="inference")
    snap = cluster(nodes=[node("n1")], queues=qs, jobs=[blocked], root=False)
    r = schedule(snap)
    assert r.bound() == {}
    msg = r.condition("dep").message
    assert msg.startswith("NonPreemptibleOverQuota: Non-preemptible workload is over quota.")
    assert "but default-queue quota is 0 cores" in msg
    ok = job("dep", queue="default-queue", cpu=100, priority_class="inference", preemptibility="preemptible")
    assert schedule(cluster(nodes=[node("n1")], queues=qs, jobs=[ok], root=False)).bound() == {"dep-0": "n1"}


def test_s13_missing_queue_and_non_leaf_queue():
    snap = cluster(
        nodes=[node("n1")],
        queues=[queue("q")],
        jobs=[job("lost", queue="nope", gpus=1), job("top", queue="root", gpus=1)],
    )
    r = schedule(snap)
    assert r.bound() == {}
    cond = r.condition("lost")
    assert (cond.reason, cond.message) == (
        "QueueDoesNotExist",
        "QueueDoesNotExist: Queue 'nope' does not exist.",
    )
    assert r.condition("top") is None and r.pg_events("top") == [] and r.pod_events("top-0") == []


def test_s30_two_halves_share_one_card_with_one_reservation():
    snap = cluster(nodes=[node("n1", gpus=1)], queues=[queue("q")], jobs=_singles(2, fraction=0.5))
    r = schedule(snap)
    binds = r.binds()
    assert [b.node for b in binds] == ["n1", "n1"]
    assert binds[0].gpu_groups == binds[1].gpu_groups and len(binds[0].gpu_groups) == 1
    assert {b.fraction for b in binds} == {"0.50"} and {b.received_resource_type for b in binds} == {
        "Fraction"
    }
    (res,) = r.reserves()
    assert (res.node, res.gpu_group) == ("n1", binds[0].gpu_groups[0])
    ops = list(r.plan.ops)
    assert ops.index(res) < ops.index(binds[0])


def _s32(strategy):
    running = job("run", pods=[pod("run-0", fraction=0.5, node_name="n1", gpu_groups=("g1",))])
    new = job("new", fraction=0.3, created=5)
    return cluster(
        nodes=[node("n1", gpus=2)],
        queues=[queue("q")],
        jobs=[running, new],
        config=ShardConfig(gpu_placement=strategy),
    )


def test_s32_fraction_binpacks_into_existing_group():
    r = schedule(_s32("binpack"))
    (b,) = r.binds()
    assert b.gpu_groups == ("g1",) and b.fraction == "0.30"
    assert r.reserves() == []


def test_s32_spread_opens_new_group():
    r = schedule(_s32("spread"))
    (b,) = r.binds()
    assert b.gpu_groups != ("g1",)
    (res,) = r.reserves()
    assert res.gpu_group == b.gpu_groups[0]


def test_s33_fractions_count_against_limit():
    running = [
        job(f"r{i}", pods=[pod(f"r{i}-0", fraction=0.5, node_name="n1", gpu_groups=("g1",))])
        for i in range(2)
    ]
    snap = cluster(
        nodes=[node("n1", gpus=2)],
        queues=[queue("q", gpu=(1, 1))],
        jobs=[*running, job("third", fraction=0.5, created=9)],
    )
    r = schedule(snap)
    assert r.bound() == {}
    assert r.condition("third").message == (
        "OverLimit: q quota has reached the allowable limit of GPUs. Limit is 1 GPUs, currently 1 GPUs allocated "
        "and workload requested 0.5 GPUs."
    )


def _s35(strategy, cpu_pod=False):
    busy = job("busy", pods=6, gpus=1, running_on=["n1"] * 6)
    new = job("new", cpu=1000, created=5) if cpu_pod else job("new", gpus=1, created=5)
    nodes = [node("n1", gpus=8), node("n2", gpus=8)]
    return cluster(
        nodes=nodes,
        queues=[queue("q")],
        jobs=[busy, new],
        config=ShardConfig(gpu_placement=strategy, cpu_placement=strategy),
    )


def test_s35_binpack_vs_spread_gpu():
    assert schedule(_s35("binpack")).bound() == {"new-0": "n1"}
    assert schedule(_s35("spread")).bound() == {"new-0": "n2"}


def test_s35_cpu_pod_prefers_cpu_only_node():
    nodes = [node("a-gpu", gpus=8), node("z-cpu", gpus=0)]
    snap = cluster(nodes=nodes, queues=[queue("q")], jobs=[job("c", cpu=1000)])
    assert schedule(snap).bound() == {"c-0": "z-cpu"}


def test_condition_cleared_once_scheduled_and_kept_types():
    snap = cluster(
        nodes=[node("n1", gpus=2)],
        queues=[queue("q")],
        jobs=[job("j", gpus=1, condition_reason="PodSchedulingErrors")],
    )
    r = schedule(snap)
    assert r.bound() == {"j-0": "n1"}
    assert any(op.pod_group == f"{NS}/j" for op in r.plan.ops if type(op).__name__ == "ClearCondition")
    assert not r.plan.of(SetCondition) and not r.plan.of(PodGroupEvent)
    assert all(isinstance(b, Bind) for b in r.binds()) and not r.plan.of(Reserve)

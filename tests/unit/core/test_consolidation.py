"""Consolidation (reference §4.3; S28, S29 and its variants) at the core level."""

from __future__ import annotations

from builders import NS, cluster, job, node, pod, queue, schedule

from shoal.core.cycle import enabled_actions
from shoal.core.model import ShardConfig
from shoal.core.plan import Evict


def evicted(r) -> list[str]:
    return sorted(e.pod.split("/", 1)[1] for e in r.plan.of(Evict))


def s28(pinned: bool = False, config: ShardConfig | None = None, big_class: str = "train", big_gpus: int = 2,
        victim_class: str = "train"):
    def runner(name, node_name):
        kw = {"node_selector": {"kubernetes.io/hostname": node_name}} if pinned else {}
        return job(name, queue="q", pods=[pod(f"{name}-0", gpus=1, node_name=node_name, **kw)],
                   priority_class=victim_class, created=1 if name == "p1" else 2)
    nodes = [node("n1", gpus=2, labels={"kubernetes.io/hostname": "n1"}),
             node("n2", gpus=2, labels={"kubernetes.io/hostname": "n2"})]
    return cluster(
        nodes=nodes,
        queues=[queue("q", gpu=(4, -1))],
        jobs=[runner("p1", "n1"), runner("p2", "n2"),
              job("big", queue="q", pods=1, gpus=big_gpus, priority_class=big_class, created=10)],
        config=config,
    )


def test_s28_one_pod_is_moved_and_the_job_pipelined_to_the_freed_node():
    r = schedule(s28())
    (ev,) = r.plan.of(Evict)
    assert ev.action == "consolidation" and ev.by == f"{NS}/big"
    victim = ev.pod.split("/", 1)[1]
    assert victim in ("p1-0", "p2-0")
    assert ev.message == (
        f"Pod {ev.pod} was preempted and rescheduled due to bin packing (resource consolidation) procedure"
    )
    assert r.pipelined() == {"big-0": ev.node}  # the moved pod itself is not pipelined: it is recreated
    assert r.bound() == {}


def test_s29_pinned_victims_are_never_stranded():
    r = schedule(s28(pinned=True))
    assert evicted(r) == []
    assert r.pipelined() == {}
    assert "didn't have enough resources: GPUs" in r.condition("big").message


def test_s29_not_attempted_when_idle_plus_releasing_gpus_are_too_few():
    r = schedule(s28(big_gpus=3))
    assert evicted(r) == []


def test_s29_spread_disables_consolidation():
    snap = s28(config=ShardConfig(gpu_placement="spread"))
    assert "consolidation" not in enabled_actions(snap)
    assert evicted(schedule(snap)) == []


def test_zero_preemptees_disables_consolidation():
    snap = s28(config=ShardConfig(max_consolidation_preemptees=0))
    assert "consolidation" not in enabled_actions(snap)
    assert evicted(schedule(snap)) == []


def test_s29_non_preemptible_pending_job_never_triggers_consolidation():
    no_preempt = ShardConfig(actions=("allocate", "consolidation", "reclaim", "stalegangeviction"))
    assert evicted(schedule(s28(big_class="build", config=no_preempt))) == []
    assert evicted(schedule(s28(big_class="build"))) == ["p2-0"]  # preempt does it (higher priority, same queue)


def test_s29_non_preemptible_pods_are_never_moved():
    assert evicted(schedule(s28(victim_class="build"))) == []


def test_victims_limited_by_max_consolidation_preemptees():
    # 1 preemptee allowed: the first candidate (p2, newest) can be moved and that is enough
    r = schedule(s28(config=ShardConfig(max_consolidation_preemptees=1)))
    assert evicted(r) == ["p2-0"]

"""Background pods (KAI v0.18, label kai.scheduler/background=true): planned as if absent."""

from __future__ import annotations

import msgspec
from builders import NS, cluster, job, node, queue

from shoal.core.background import ACTION, EVICTION_MESSAGE
from shoal.core.cycle import run_cycle
from shoal.core.ingest.pods import pod_from
from shoal.core.plan import Bind, Evict, Pipeline


def background(spec, **changes):
    spec.pods = [msgspec.structs.replace(p, background=True, **changes) for p in spec.pods]
    return spec


def queues():
    return [queue("maintenance", gpu=(0, -1, 0)), queue("team", gpu=(8, -1))]


def test_a_placement_that_needs_the_room_is_pipelined_and_the_background_pod_evicted():
    snap = cluster(nodes=[node("n1", gpus=8)], queues=queues(),
                   jobs=[background(job("hc", queue="maintenance", gpus=1, running_on=["n1"])),
                         job("w", queue="team", gpus=8, created=5)])
    plan = run_cycle(snap)
    assert [(op.pod, op.node) for op in plan.of(Pipeline)] == [(f"{NS}/w-0", "n1")]
    assert [(op.pod, op.action, op.by, op.message) for op in plan.of(Evict)] == [
        (f"{NS}/hc-0", ACTION, f"{NS}/w", EVICTION_MESSAGE)]
    assert {q.name: q.gpu.allocated for q in plan.queues}["maintenance"] == 0  # counts in no queue


def test_room_that_is_idle_is_used_first_and_nothing_is_evicted():
    snap = cluster(nodes=[node("n1", gpus=8)], queues=queues(),
                   jobs=[background(job("hc", queue="maintenance", gpus=2, running_on=["n1"])),
                         job("w", queue="team", pods=3, gpus=2, min_member=3, created=5)])
    plan = run_cycle(snap)
    assert len(plan.of(Bind)) == 3 and plan.of(Evict) == [] and plan.of(Pipeline) == []


def test_only_the_background_pods_whose_room_was_taken_go_in_name_order():
    snap = cluster(nodes=[node("n1", gpus=8)], queues=queues(),
                   jobs=[background(job("hc", queue="maintenance", pods=3, gpus=1, running_on=["n1"] * 3)),
                         job("w", queue="team", gpus=6, created=5)])
    plan = run_cycle(snap)  # 5 idle: the 6-GPU pod takes one background GPU; hc-0 and hc-1 fit back
    assert [op.pod for op in plan.of(Evict)] == [f"{NS}/hc-2"]


def test_a_pdb_blocked_or_deleting_background_pod_is_an_ordinary_occupant():
    for changes in ({"eviction_blocked": True}, {"deleting": True}):
        snap = cluster(nodes=[node("n1", gpus=8)], queues=queues(),
                       jobs=[background(job("hc", queue="maintenance", gpus=1, running_on=["n1"]), **changes),
                             job("w", queue="team", gpus=8, created=5)])
        plan = run_cycle(snap)
        assert plan.of(Evict) == [], changes


def test_ingest_marks_only_placed_managed_labelled_pods():
    def obj(labels, node_name="n1"):
        spec = {"containers": [{"name": "c"}]}
        if node_name:
            spec["nodeName"] = node_name
        return {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": labels}, "spec": spec}

    label = {"kai.scheduler/background": "true"}
    assert pod_from(obj(label), pod_group="g", subgroup=None, managed=True, now="").background
    assert not pod_from(obj(label), pod_group="g", subgroup=None, managed=False, now="").background
    assert not pod_from(obj(label, None), pod_group="g", subgroup=None, managed=True, now="").background
    assert not pod_from(obj({"kai.scheduler/background": "false"}), pod_group="g", subgroup=None, managed=True,
                        now="").background


def test_a_fraction_placed_on_the_portion_a_background_pod_holds_evicts_it():
    """A shared GPU with an ordinary sharer: the background pod's portion is releasing room."""
    hc = background(job("hc", queue="maintenance", fraction=0.5, running_on=["n1"]))
    hc.pods = [msgspec.structs.replace(p, gpu_groups=("g1",)) for p in hc.pods]
    other = job("other", queue="team", fraction=0.25, running_on=["n1"], created=2)
    other.pods = [msgspec.structs.replace(p, gpu_groups=("g1",)) for p in other.pods]
    snap = cluster(nodes=[node("n1", gpus=1)], queues=queues(),
                   jobs=[hc, other, job("w", queue="team", fraction=0.75, created=5)])
    plan = run_cycle(snap)
    assert [(op.pod, op.node, op.gpu_groups) for op in plan.of(Pipeline)] == [(f"{NS}/w-0", "n1", ("g1",))]
    assert [(op.pod, op.action) for op in plan.of(Evict)] == [(f"{NS}/hc-0", ACTION)]
    snap = cluster(nodes=[node("n1", gpus=1)], queues=queues(),
                   jobs=[hc, other, job("w", queue="team", fraction=0.25, created=5)])
    plan = run_cycle(snap)  # the free quarter is enough: bound beside them, nothing evicted
    assert len(plan.of(Bind)) == 1 and plan.of(Evict) == []


def test_a_pod_that_consolidation_moves_onto_background_room_evicts_the_background_pod():
    """The plan carries only the moved pod's eviction, but the consolidation holds only if the room it was
    re-placed on is there when its controller recreates it: the background pod goes, named after the mover."""
    snap = cluster(nodes=[node("n1", gpus=4), node("n2", gpus=4)], queues=queues(),
                   jobs=[job("m", queue="team", gpus=2, running_on=["n1"]),
                         job("a", queue="team", gpus=2, running_on=["n2"], priority_class="build"),
                         background(job("hc", queue="maintenance", gpus=1, running_on=["n2"])),
                         job("w", queue="team", gpus=4, created=5)])
    plan = run_cycle(snap)
    assert [(op.pod, op.node) for op in plan.of(Pipeline)] == [(f"{NS}/w-0", "n1")]
    assert sorted((op.pod, op.node, op.action, op.by) for op in plan.of(Evict)) == [
        (f"{NS}/hc-0", "n2", ACTION, f"{NS}/m"), (f"{NS}/m-0", "n1", "consolidation", f"{NS}/w")]

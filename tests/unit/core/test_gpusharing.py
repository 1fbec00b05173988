"""GPU fractions: group choice, multi-device, deterministic group ids, queue accounting, bad annotations."""

from __future__ import annotations

from builders import cluster, job, node, pod, queue, schedule

from shoal.core.gpusharing import new_group_id, pick_groups, portion_text
from shoal.core.model import ShardConfig
from shoal.core.session import Session


def _session(nodes, jobs, strategy="binpack"):
    return Session(
        cluster(nodes=nodes, queues=[queue("q")], jobs=jobs, config=ShardConfig(gpu_placement=strategy))
    )


def _task(session, key):
    return next(t for j in session.jobs.values() for t in j.tasks if t.key == key)


def _shared_node():
    used = [
        job("a", pods=[pod("a-0", fraction=0.7, node_name="n1", gpu_groups=("ga",))]),
        job("b", pods=[pod("b-0", fraction=0.2, node_name="n1", gpu_groups=("gb",))]),
    ]
    return used


def test_binpack_prefers_the_fullest_fitting_group():
    s = _session([node("n1", gpus=4)], [*_shared_node(), job("x", fraction=0.25)])
    picks, pipelined = pick_groups(s.node_by_name["n1"], _task(s, "ns/x-0"), "binpack")
    assert [p.group_id for p in picks] == ["ga"] and not pipelined


def test_binpack_skips_groups_without_room():
    s = _session([node("n1", gpus=4)], [*_shared_node(), job("x", fraction=0.5)])
    picks, _ = pick_groups(s.node_by_name["n1"], _task(s, "ns/x-0"), "binpack")
    assert [p.group_id for p in picks] == ["gb"]


def test_spread_prefers_a_new_whole_gpu():
    s = _session([node("n1", gpus=4)], [*_shared_node(), job("x", fraction=0.25)], "spread")
    picks, _ = pick_groups(s.node_by_name["n1"], _task(s, "ns/x-0"), "spread")
    assert picks[0].new and picks[0].group_id == new_group_id("n1", "uid-x-0", 0)


def test_multi_device_fraction_takes_distinct_groups():
    s = _session(
        [node("n1", gpus=4)], [*_shared_node(), job("x", pods=[pod("x-0", fraction=0.25, devices=3)])]
    )
    picks, _ = pick_groups(s.node_by_name["n1"], _task(s, "ns/x-0"), "binpack")
    ids = [p.group_id for p in picks]
    assert ids[:2] == ["ga", "gb"] and picks[2].new and len(set(ids)) == 3


def test_no_fit_when_no_gpu_left():
    s = _session([node("n1", gpus=2)], [*_shared_node(), job("x", fraction=0.9)])
    assert pick_groups(s.node_by_name["n1"], _task(s, "ns/x-0"), "binpack") is None


def test_new_group_ids_are_deterministic_and_distinct():
    a = new_group_id("n1", "uid-1", 0)
    assert a == new_group_id("n1", "uid-1", 0)
    assert (
        len(
            {
                a,
                new_group_id("n1", "uid-1", 1),
                new_group_id("n2", "uid-1", 0),
                new_group_id("n1", "uid-2", 0),
            }
        )
        == 4
    )
    assert len(a) == 36 and a.count("-") == 4


def test_multi_device_bind_reserves_each_new_group():
    snap = cluster(
        nodes=[node("n1", gpus=4)],
        queues=[queue("q")],
        jobs=[job("x", pods=[pod("x-0", fraction=0.5, devices=2)])],
    )
    r = schedule(snap)
    (b,) = r.binds()
    assert len(b.gpu_groups) == 2 and b.gpus == 2 and b.fraction == "0.50"
    assert sorted(x.gpu_group for x in r.reserves()) == sorted(b.gpu_groups)
    assert r.queue("q").gpu.allocated == 1000


def test_gpu_memory_pods_count_against_min_node_memory_for_fair_share():
    nodes = [node("small", gpus=1, gpu_memory=20480), node("big", gpus=1, gpu_memory=40960)]
    snap = cluster(nodes=nodes, queues=[queue("q")], jobs=[job("m", gpu_memory=10240)])
    r = schedule(snap)
    (b,) = r.binds()
    assert r.queue("q").gpu.allocated == 500  # 10240 / 20480 (smallest node GPU memory)
    assert b.fraction == ("0.50" if b.node == "small" else "0.25")


def test_gpu_memory_limit_check_uses_max_node_memory():
    nodes = [node("small", gpus=1, gpu_memory=20480), node("big", gpus=1, gpu_memory=40960)]
    q = queue("q", gpu=(1, 0.25))
    snap = cluster(nodes=nodes, queues=[q], jobs=[job("m", gpu_memory=10240)])
    assert len(schedule(snap).binds()) == 1  # 10240 / 40960 = 0.25 fits a 0.25 limit


def test_invalid_fraction_annotation_blocks_only_its_group():
    bad = job("bad", pods=[pod("bad-0", fraction_error='gpu-fraction "1.5" must be a number in (0, 1)')])
    good = job("good", gpus=1, created=2)
    snap = cluster(nodes=[node("n1", gpus=2)], queues=[queue("q")], jobs=[bad, good])
    r = schedule(snap)
    assert r.bound() == {"good-0": "n1"}
    cond = r.condition("bad")
    assert cond.reason == "PodSchedulingErrors"
    assert cond.message == (
        "PodSchedulingErrors: Pod ns/bad-0 has an invalid GPU sharing request: "
        'gpu-fraction "1.5" must be a number in (0, 1).'
    )


def test_portion_text_formats_two_decimals():
    s = _session([node("n1", gpus=1)], [job("x", fraction=0.333), job("y", fraction=0.5)])
    assert portion_text(_task(s, "ns/x-0")) == "0.33"
    assert portion_text(_task(s, "ns/y-0")) == "0.50"


def test_reservation_pods_rebuild_empty_groups():
    from shoal.core.model import Pod

    res = Pod(
        uid="r1",
        namespace="kai-resource-reservation",
        name="gpu-reservation-1",
        gpus=1,
        node_name="n1",
        phase="Running",
        gpu_groups=("g9",),
        managed=False,
    )
    snap = cluster(
        nodes=[node("n1", gpus=1)], queues=[queue("q")], jobs=[job("x", fraction=0.5)], extra_pods=[res]
    )
    r = schedule(snap)
    (b,) = r.binds()
    assert b.gpu_groups == ("g9",) and r.reserves() == []  # joins the reserved GPU, no second reservation
    s = Session(snap)
    assert s.node_by_name["n1"].idle_gpus == 0 and "g9" in s.node_by_name["n1"].groups


def test_fraction_pipelined_onto_releasing_portion_and_followers_stay_pipelined():
    leaving = job(
        "old",
        pods=[
            pod("old-0", fraction=0.75, node_name="n1", gpu_groups=("g1",), deleting=True),
            pod("old-1", fraction=0.25, node_name="n1", gpu_groups=("g1",)),
        ],
    )
    snap = cluster(
        nodes=[node("n1", gpus=1)],
        queues=[queue("q")],
        jobs=[leaving, job("new", pods=2, fraction=0.5, created=5)],
    )
    r = schedule(snap)
    assert r.bound() == {}
    assert r.pipelined() == {"new-0": "n1"}  # 0.5 fits only with the releasing 0.75 of g1
    assert r.reserves() == []


def test_group_opened_on_a_releasing_gpu_is_joined_only_by_pipelining():
    leaving = job("old", pods=[pod("old-0", gpus=1, node_name="n1", deleting=True)])
    snap = cluster(
        nodes=[node("n1", gpus=1)],
        queues=[queue("q")],
        jobs=[leaving, job("new", pods=2, fraction=0.25, created=5)],
    )
    r = schedule(snap)
    assert r.bound() == {} and r.reserves() == []
    assert r.pipelined() == {"new-0": "n1", "new-1": "n1"}

"""Hypothesis properties of allocate: gang atomicity, no over-commit, determinism under input permutation."""

from __future__ import annotations

import random
from collections import defaultdict

import msgspec
from builders import PRIORITY_CLASSES, queue
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.core.cycle import run_cycle
from shoal.core.model import FractionRequest, Node, Pod, PodGroup, ShardConfig, make_snapshot
from shoal.core.plan import Bind, Evict, Pipeline, Reserve

NS = "ns"


@st.composite
def clusters(draw):
    n_nodes = draw(st.integers(1, 4))
    nodes, pods, groups = [], [], []
    for i in range(n_nodes):
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        nodes.append(
            Node(
                name=f"n{i}",
                gpus=gpus,
                cpu_milli=draw(st.integers(1, 16)) * 1000,
                memory_bytes=64 * 2**30,
                pods=draw(st.integers(2, 12)),
                gpu_memory_mib=40960,
            )
        )
        used = draw(st.integers(0, gpus))
        if used:
            groups.append(PodGroup(namespace=NS, name=f"run{i}", uid=f"ur{i}", queue="q", min_member=1))
            pods.append(
                Pod(
                    uid=f"ur{i}-0",
                    namespace=NS,
                    name=f"run{i}-0",
                    pod_group=f"run{i}",
                    gpus=used,
                    cpu_milli=500,
                    node_name=f"n{i}",
                    phase="Running",
                    deleting=draw(st.booleans()),
                )
            )
        if gpus - used >= 1 and draw(st.booleans()):
            groups.append(PodGroup(namespace=NS, name=f"sh{i}", uid=f"us{i}", queue="q", min_member=1))
            pods.append(
                Pod(
                    uid=f"us{i}-0",
                    namespace=NS,
                    name=f"sh{i}-0",
                    pod_group=f"sh{i}",
                    fraction=FractionRequest(portion_milli=draw(st.sampled_from([250, 500, 700]))),
                    node_name=f"n{i}",
                    phase="Running",
                    gpu_groups=(f"g{i}",),
                )
            )
    for j in range(draw(st.integers(1, 6))):
        size = draw(st.integers(1, 4))
        min_member = draw(st.integers(1, size))
        kind = draw(st.sampled_from(["gpu", "frac", "cpu"]))
        groups.append(
            PodGroup(
                namespace=NS,
                name=f"j{j}",
                uid=f"uj{j}",
                queue=draw(st.sampled_from(["q", "r"])),
                min_member=min_member,
                created=j,
                priority_class_name=draw(st.sampled_from(["train", "build"])),
            )
        )
        for k in range(size):
            kw = {}
            if kind == "gpu":
                kw["gpus"] = draw(st.integers(1, 3))
            elif kind == "frac":
                kw["fraction"] = FractionRequest(
                    portion_milli=draw(st.sampled_from([300, 500, 800])), num_devices=draw(st.integers(1, 2))
                )
            kw["cpu_milli"] = draw(st.sampled_from([0, 500, 2000]))
            pods.append(
                Pod(uid=f"uj{j}-{k}", namespace=NS, name=f"j{j}-{k}", pod_group=f"j{j}", created=k, **kw)
            )
    strategy = draw(st.sampled_from(["binpack", "spread"]))
    queues = [queue("root", parent=None), queue("q", gpu=(2, -1)), queue("r", gpu=(1, 3))]
    return dict(
        nodes=nodes,
        pods=pods,
        pod_groups=groups,
        queues=queues,
        priority_classes=PRIORITY_CLASSES,
        config=ShardConfig(gpu_placement=strategy, cpu_placement=strategy),
        now=1000,
        revision=7,
    )


def _check_no_overcommit(snap, plan):
    """Now: running pods (releasing included) + binds fit. Later: what stays + binds + pipelined fit."""
    nodes = {n.name: n for n in snap.nodes}
    pods = {p.key: p for p in snap.pods}
    evicted = {op.pod for op in plan.ops if isinstance(op, Evict)}
    now_gpus, now_cpu, slots = defaultdict(int), defaultdict(int), defaultdict(int)
    later_gpus, later_cpu = defaultdict(int), defaultdict(int)
    now_groups, later_groups = defaultdict(set), defaultdict(set)
    group_now, group_later = defaultdict(int), defaultdict(int)

    def frac(p):
        return p.fraction.portion_milli

    for p in snap.pods:
        if p.node_name is None:
            continue
        n = p.node_name
        stays = not p.deleting and p.key not in evicted
        now_cpu[n] += p.cpu_milli
        now_gpus[n] += p.gpus
        slots[n] += 1
        if stays:
            later_cpu[n] += p.cpu_milli
            later_gpus[n] += p.gpus
        for g in p.gpu_groups:
            now_groups[n].add(g)
            group_now[(n, g)] += frac(p)
            if stays:
                later_groups[n].add(g)
                group_later[(n, g)] += frac(p)
    for op in plan.ops:
        if isinstance(op, Reserve):
            slots[op.node] += 1
        if not isinstance(op, (Bind, Pipeline)):
            continue
        p = pods[op.pod]
        later_cpu[op.node] += p.cpu_milli
        later_gpus[op.node] += p.gpus
        for g in op.gpu_groups:
            later_groups[op.node].add(g)
            group_later[(op.node, g)] += frac(p)
        if isinstance(op, Bind):
            now_cpu[op.node] += p.cpu_milli
            now_gpus[op.node] += p.gpus
            slots[op.node] += 1
            for g in op.gpu_groups:
                now_groups[op.node].add(g)
                group_now[(op.node, g)] += frac(p)
    for name, n in nodes.items():
        assert now_cpu[name] <= n.cpu_milli and later_cpu[name] <= n.cpu_milli, name
        assert slots[name] <= n.pods, name
        assert now_gpus[name] + len(now_groups[name]) <= n.gpus, name
        assert later_gpus[name] + len(later_groups[name]) <= n.gpus, name
    for key, used in (*group_now.items(), *group_later.items()):
        assert used <= 1000, key


def _check_gang(snap, plan):
    placed = defaultdict(int)
    pods = {p.key: p for p in snap.pods}
    for op in plan.ops:
        if isinstance(op, (Bind, Pipeline)):
            placed[pods[op.pod].pod_group] += 1
    for g in snap.pod_groups:
        running = sum(1 for p in snap.pods if p.pod_group == g.name and p.node_name and not p.deleting)
        if placed[g.name]:
            assert running + placed[g.name] >= g.min_member, g.name


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_no_overcommit_and_gang_atomicity(spec):
    snap = make_snapshot(**spec)
    plan = run_cycle(snap)
    _check_no_overcommit(snap, plan)
    _check_gang(snap, plan)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.integers(0, 2**32 - 1))
def test_shuffled_input_gives_identical_plan(spec, seed):
    rng = random.Random(seed)
    shuffled = {k: (rng.sample(v, len(v)) if isinstance(v, list) else v) for k, v in spec.items()}
    a = msgspec.json.encode(run_cycle(make_snapshot(**spec)))
    b = msgspec.json.encode(run_cycle(make_snapshot(**shuffled)))
    assert a == b

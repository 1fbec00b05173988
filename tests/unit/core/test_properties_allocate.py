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
        nodes.append(Node(name=f"n{i}", gpus=gpus, cpu_milli=draw(st.integers(1, 16)) * 1000,
                          memory_bytes=64 * 2**30, pods=draw(st.integers(2, 12)), gpu_memory_mib=40960))
        used = draw(st.integers(0, gpus))
        if used:
            groups.append(PodGroup(namespace=NS, name=f"run{i}", uid=f"ur{i}", queue="q", min_member=1))
            pods.append(Pod(uid=f"ur{i}-0", namespace=NS, name=f"run{i}-0", pod_group=f"run{i}", gpus=used,
                            cpu_milli=500, node_name=f"n{i}", phase="Running",
                            deleting=draw(st.booleans())))
        if gpus - used >= 1 and draw(st.booleans()):
            groups.append(PodGroup(namespace=NS, name=f"sh{i}", uid=f"us{i}", queue="q", min_member=1))
            pods.append(Pod(uid=f"us{i}-0", namespace=NS, name=f"sh{i}-0", pod_group=f"sh{i}",
                            fraction=FractionRequest(portion_milli=draw(st.sampled_from([250, 500, 700]))),
                            node_name=f"n{i}", phase="Running", gpu_groups=(f"g{i}",)))
    for j in range(draw(st.integers(1, 6))):
        size = draw(st.integers(1, 4))
        min_member = draw(st.integers(1, size))
        kind = draw(st.sampled_from(["gpu", "frac", "cpu"]))
        groups.append(PodGroup(namespace=NS, name=f"j{j}", uid=f"uj{j}", queue=draw(st.sampled_from(["q", "r"])),
                               min_member=min_member, created=j,
                               priority_class_name=draw(st.sampled_from(["train", "build"]))))
        for k in range(size):
            kw = {}
            if kind == "gpu":
                kw["gpus"] = draw(st.integers(1, 3))
            elif kind == "frac":
                kw["fraction"] = FractionRequest(portion_milli=draw(st.sampled_from([300, 500, 800])),
                                                 num_devices=draw(st.integers(1, 2)))
            kw["cpu_milli"] = draw(st.sampled_from([0, 500, 2000]))
            pods.append(Pod(uid=f"uj{j}-{k}", namespace=NS, name=f"j{j}-{k}", pod_group=f"j{j}", created=k, **kw))
    strategy = draw(st.sampled_from(["binpack", "spread"]))
    queues = [queue("root", parent=None), queue("q", gpu=(2, -1)), queue("r", gpu=(1, 3))]
    return dict(nodes=nodes, pods=pods, pod_groups=groups, queues=queues, priority_classes=PRIORITY_CLASSES,
                config=ShardConfig(gpu_placement=strategy, cpu_placement=strategy), now=1000, revision=7)


def _check_no_overcommit(snap, plan):
    nodes = {n.name: n for n in snap.nodes}
    pods = {p.key: p for p in snap.pods}
    gpus = defaultdict(int)
    cpu = defaultdict(int)
    slots = defaultdict(int)
    group_use = defaultdict(int)
    groups_on = defaultdict(set)
    future_gpus = defaultdict(int)
    future_cpu = defaultdict(int)
    for p in snap.pods:
        if p.node_name is None:
            continue
        cpu[p.node_name] += p.cpu_milli
        slots[p.node_name] += 1
        gpus[p.node_name] += p.gpus
        if not p.deleting:
            future_gpus[p.node_name] += p.gpus
            future_cpu[p.node_name] += p.cpu_milli
        for g in p.gpu_groups:
            groups_on[p.node_name].add(g)
            group_use[(p.node_name, g)] += p.fraction.portion_milli
    for op in plan.ops:
        if isinstance(op, Evict):  # core II: an evicted pod's resources are released for what is pipelined
            future_gpus[op.node] -= pods[op.pod].gpus
            future_cpu[op.node] -= pods[op.pod].cpu_milli
        if isinstance(op, Reserve):
            slots[op.node] += 1
        if isinstance(op, (Bind, Pipeline)):
            p = pods[op.pod]
            future_cpu[op.node] += p.cpu_milli
            future_gpus[op.node] += p.gpus
            if isinstance(op, Bind):
                cpu[op.node] += p.cpu_milli
                gpus[op.node] += p.gpus
                slots[op.node] += 1
            for g in op.gpu_groups:
                if isinstance(op, Bind):
                    groups_on[op.node].add(g)
                    group_use[(op.node, g)] += p.fraction.portion_milli
    for name, n in nodes.items():
        assert cpu[name] <= n.cpu_milli and future_cpu[name] <= n.cpu_milli
        assert slots[name] <= n.pods
        assert gpus[name] + len(groups_on[name]) <= n.gpus
        assert future_gpus[name] + len(groups_on[name]) <= n.gpus
    for key, used in group_use.items():
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

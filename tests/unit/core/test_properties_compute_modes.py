"""Hypothesis property (KAI v0.18): no shared GPU ever holds pods of two compute modes.

Random nodes, running fractions of either mode (some GPUs kept only by a reservation pod that carries a mode),
and pending fractional jobs of random modes and sizes; the plan of one cycle, then of the next cycle after its
binds took effect, never puts a pod into a group whose pods (or reservation pod) have another mode.
"""

from __future__ import annotations

from collections import defaultdict

import msgspec
from builders import PRIORITY_CLASSES, queue
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.core.cycle import run_cycle
from shoal.core.model import (
    DEFAULT_RESERVATION_NAMESPACE,
    FractionRequest,
    Node,
    Pod,
    PodGroup,
    ShardConfig,
    make_snapshot,
)
from shoal.core.plan import Bind, Pipeline

NS = "ns"
MODES = (None, "time-slicing", "sm-sharing")  # None: the annotation is absent (time-slicing)


@st.composite
def clusters(draw):
    nodes, pods, groups = [], [], []
    for i in range(draw(st.integers(1, 3))):
        gpus = draw(st.integers(1, 3))
        nodes.append(Node(name=f"n{i}", gpus=gpus, cpu_milli=64_000, memory_bytes=2**36, pods=40,
                          gpu_memory_mib=40960))
        for k in range(draw(st.integers(0, gpus))):
            gid, mode = f"g{i}{k}", draw(st.sampled_from(MODES))
            if draw(st.booleans()):  # a GPU kept by its reservation pod alone, with the mode the binder wrote
                pods.append(Pod(uid=f"r{i}{k}", namespace=DEFAULT_RESERVATION_NAMESPACE, name=f"resv-{i}{k}",
                                node_name=f"n{i}", phase="Running", gpu_groups=(gid,), gpus=1, compute_mode=mode,
                                managed=False))
                continue
            groups.append(PodGroup(namespace=NS, name=f"run{i}{k}", uid=f"ur{i}{k}", queue="q"))
            pods.append(Pod(uid=f"ur{i}{k}", namespace=NS, name=f"run{i}{k}", pod_group=f"run{i}{k}",
                            fraction=FractionRequest(portion_milli=draw(st.sampled_from([200, 400]))),
                            node_name=f"n{i}", phase="Running", gpu_groups=(gid,), compute_mode=mode))
    for j in range(draw(st.integers(1, 6))):
        size = draw(st.integers(1, 3))
        mode = draw(st.sampled_from(MODES))
        groups.append(PodGroup(namespace=NS, name=f"j{j}", uid=f"uj{j}", queue="q", min_member=1, created=j))
        for k in range(size):
            pods.append(Pod(uid=f"uj{j}-{k}", namespace=NS, name=f"j{j}-{k}", pod_group=f"j{j}", created=k,
                            fraction=FractionRequest(portion_milli=draw(st.sampled_from([100, 300, 500])),
                                                     num_devices=draw(st.integers(1, 2))),
                            compute_mode=mode))
    strategy = draw(st.sampled_from(["binpack", "spread"]))
    return dict(nodes=nodes, pods=pods, pod_groups=groups, queues=[queue("root", parent=None), queue("q")],
                priority_classes=PRIORITY_CLASSES, config=ShardConfig(gpu_placement=strategy), now=1000, revision=1)


def _modes_per_group(snap, plan) -> dict[tuple[str, str], set[str]]:
    pods = {p.key: p for p in snap.pods}
    modes: dict[tuple[str, str], set[str]] = defaultdict(set)
    for p in snap.pods:
        for g in p.gpu_groups:
            if p.namespace != DEFAULT_RESERVATION_NAMESPACE or p.compute_mode:
                modes[(p.node_name, g)].add(p.compute_mode or "time-slicing")
    for op in plan.ops:
        if isinstance(op, (Bind, Pipeline)):
            p = pods[op.pod]
            for g in op.gpu_groups:
                modes[(op.node, g)].add(p.compute_mode or "time-slicing")
    return modes


def _after_binds(snap, plan):
    bound = {op.pod: op for op in plan.ops if isinstance(op, Bind)}
    pods = [msgspec.structs.replace(p, node_name=bound[p.key].node, gpu_groups=bound[p.key].gpu_groups,
                                    phase="Running") if p.key in bound else p for p in snap.pods]
    return msgspec.structs.replace(snap, pods=tuple(pods), revision=snap.revision + 1)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_no_shared_gpu_holds_two_compute_modes(spec):
    snap = make_snapshot(**spec)
    for _ in range(2):
        plan = run_cycle(snap)
        for key, modes in _modes_per_group(snap, plan).items():
            assert len(modes) == 1, (key, modes)
        snap = _after_binds(snap, plan)

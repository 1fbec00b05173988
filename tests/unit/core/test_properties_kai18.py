"""KAI v0.18 semi-preemptible gangs and background pods as hypothesis properties, on the varied clusters of
`test_properties_needed_victims` with some PodGroups made semi-preemptible and some running pods background.

- a semi-preemptible gang's core (its first minMember running pods in task order) is never a victim of
  reclaim, preempt or consolidation, and every plan keeps "only needed victims";
- each queue's allocated non-preemptible figure is exactly its non-preemptible pods plus the cores of its
  semi-preemptible gangs, after the plan;
- a background pod is evicted only by `backgroundpods` (never by another action), only on a node where a
  placement of the same plan is pipelined, by that placement's PodGroup, or where a pod that consolidation
  moves was re-placed, by the moved pod's PodGroup; without such a move, a node that receives no pipelined
  placement keeps all its background pods.
"""

from __future__ import annotations

from collections import defaultdict

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_properties_needed_victims import clusters

from shoal.core.audit import unneeded_evictions
from shoal.core.background import ACTION
from shoal.core.cycle import run_cycle
from shoal.core.model import make_snapshot
from shoal.core.plan import Bind, Evict, Pipeline

NP_CLASSES = {"build", "inference"}


@st.composite
def kai18_clusters(draw):
    spec = draw(clusters())
    groups = spec["pod_groups"]
    semi = {g.name for g in groups if draw(st.integers(0, 2)) == 0}
    spec["pod_groups"] = [msgspec.structs.replace(g, preemptibility="semi-preemptible") if g.name in semi else g
                          for g in groups]
    members: dict[str, list] = defaultdict(list)
    for p in spec["pods"]:
        members[p.pod_group].append(p)
    background = set()  # whole PodGroups of running whole-GPU or CPU pods, as a labelled workload's are
    for g in groups:
        pods = members[g.name]
        if (g.name not in semi and pods and all(p.node_name and not p.gpu_groups for p in pods)
                and draw(st.integers(0, 3)) == 0):
            background.add(g.name)
    spec["pods"] = [msgspec.structs.replace(p, background=True) if p.pod_group in background else p
                    for p in spec["pods"]]
    return spec


def _core(pods: list) -> list:
    return sorted(pods, key=lambda p: (p.created, p.uid, p.name))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kai18_clusters())
def test_semi_preemptible_core_is_never_a_victim_and_quota_figures_count_only_the_core(spec):
    snap = make_snapshot(**spec)
    plan = run_cycle(snap)
    assert unneeded_evictions(snap, plan) == []
    evicted = {op.pod: op for op in plan.of(Evict)}
    groups = {g.name: g for g in snap.pod_groups}
    running: dict[str, list] = defaultdict(list)
    for p in snap.pods:
        if p.node_name and p.pod_group and not p.background:
            running[p.pod_group].append(p)
    for name, group in groups.items():
        if group.preemptibility != "semi-preemptible":
            continue
        core = _core(running[name])[: group.min_member]
        for p in core:
            ev = evicted.get(p.key)
            assert ev is None or ev.action == "stalegangeviction", (p.key, ev)
    # non-preemptible figures after the plan: non-preemptible pods and semi-preemptible cores, per leaf queue
    active: dict[str, list] = defaultdict(list)
    for name, pods in running.items():
        active[name].extend(p for p in pods if p.key not in evicted)
    by_key = {p.key: p for p in snap.pods}
    for op in plan.ops:
        if isinstance(op, (Bind, Pipeline)):
            p = by_key[op.pod]
            active[p.pod_group].append(p)
    want: dict[str, int] = defaultdict(int)
    for name, pods in active.items():
        group = groups[name]
        if group.preemptibility == "semi-preemptible":
            counted = _core(pods)[: group.min_member]
        elif group.priority_class_name in NP_CLASSES:
            counted = pods
        else:
            continue
        want[group.queue] += sum(p.gpus * 1000 + (p.fraction.portion_milli if p.fraction else 0) for p in counted)
    figures = {q.name: q.gpu.allocated_non_preemptible for q in plan.queues}
    for q in ("d1-p1", "d1-p2", "d2-p1", "d2-p2"):
        assert figures.get(q, 0) == want[q], (q, figures, dict(want))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kai18_clusters())
def test_a_background_pod_is_evicted_only_where_a_placement_of_the_plan_takes_its_room(spec):
    snap = make_snapshot(**spec)
    plan = run_cycle(snap)
    background = {p.key: p for p in snap.pods if p.background}
    pipelined: dict[str, set[str]] = defaultdict(set)  # node -> PodGroups pipelined there
    for op in plan.of(Pipeline):
        pipelined[op.node].add(op.pod_group)
    # a pod that consolidation moves is re-placed in the plan's simulation, but the plan carries only its
    # eviction (its controller recreates it): its PodGroup may be the taker where nothing is pipelined
    moved = {ev.pod_group for ev in plan.of(Evict) if ev.action == "consolidation"}
    for ev in plan.of(Evict):
        if ev.pod in background:
            assert ev.action == ACTION, ev  # no other action takes a background pod
            if pipelined[ev.node]:
                assert ev.by in pipelined[ev.node], (ev, dict(pipelined))
            else:
                assert ev.by in moved, (ev, moved)
        else:
            assert ev.action != ACTION, ev
    if not moved:
        for key, p in background.items():
            if p.node_name not in pipelined:
                assert key not in {ev.pod for ev in plan.of(Evict)}, key

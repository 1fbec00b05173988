"""Checks of a plan against SPEC §4 "only needed victims", and the per-action eviction figures.

An eviction by reclaim, preempt or consolidation is needed when it is on a node where its evictor's
pods are bound or pipelined in the same plan, or when it is a gang-mate that the victim's gang must lose:
its gang has an eviction on such a node by the same evictor, and without the off-node ones the gang
would be left below its minimum, so the whole gang goes (every running pod of it is evicted in the plan,
possibly by several evictors). Consolidation's moved pods are
re-placed by the next cycles, but the moves are still chosen for the preemptor's nodes, so the same
rule holds for them. A stale-gang eviction has no evictor placement and is not checked.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from shoal.core.model import Snapshot
from shoal.core.plan import Bind, Evict, Pipeline, Plan

CHECKED = ("consolidation", "reclaim", "preempt")


def unneeded_evictions(snapshot: Snapshot, plan: Plan) -> list[Evict]:
    """The plan's evictions that break "only needed victims" (empty when the plan keeps it)."""
    placed: dict[str, set[str]] = defaultdict(set)
    for op in plan.ops:
        if isinstance(op, (Bind, Pipeline)) and op.pod_group:
            placed[op.pod_group].add(op.node)
    running: Counter[str] = Counter()
    minimum: dict[str, int] = {}
    for g in snapshot.pod_groups:
        minimum[f"{g.namespace}/{g.name}"] = max(g.min_member, 1)
    for p in snapshot.pods:
        if p.node_name is not None and p.pod_group:
            running[f"{p.namespace}/{p.pod_group}"] += 1
    by_gang: dict[tuple[str, str], list[Evict]] = defaultdict(list)
    evicted: Counter[str] = Counter()
    for op in plan.of(Evict):
        evicted[op.pod_group or op.pod] += 1
        if op.action in CHECKED:
            by_gang[(op.by, op.pod_group or op.pod)].append(op)
    bad: list[Evict] = []
    for (by, gang), ops in by_gang.items():
        nodes = placed.get(by, set())
        on = [op for op in ops if op.node in nodes]
        off = [op for op in ops if op.node not in nodes]
        if not off:
            continue
        gang_running = running.get(gang, len(ops))
        whole = evicted[gang] >= gang_running  # the gang is evicted whole (by this and other evictors)
        must_go = gang_running - (evicted[gang] - len(off)) < minimum.get(gang, 1)
        if on and whole and must_go:
            continue
        bad.extend(off)
    return sorted(bad, key=lambda op: op.pod)


def eviction_figures(plan: Plan) -> dict[str, dict[str, int]]:
    """Per eviction action: evictions, and the pods its evictors got pipelined or bound in this plan."""
    evictors: dict[str, set[str]] = defaultdict(set)
    out: dict[str, dict[str, int]] = {}
    for op in plan.of(Evict):
        row = out.setdefault(op.action, {"evictions": 0, "placed": 0, "pipelined": 0})
        row["evictions"] += 1
        evictors[op.action].add(op.by)
    for action, groups in evictors.items():
        row = out[action]
        for op in plan.ops:
            if isinstance(op, (Bind, Pipeline)) and op.pod_group in groups:
                row["placed"] += 1
                row["pipelined"] += isinstance(op, Pipeline)
    return out

"""Each subgroup's own topology constraint, applied inside the job's (KAI §6.1 "the parent's constraint bounds
its children"; Grove's KAI backend writes one per PodClique and per PodCliqueScalingGroup).

A subgroup is constrained when its `topologyConstraint` names a required or preferred level; a constraint
without a `topology` name uses the job's. The job's own constraint (topology.py) picks the job's domain
first; inside it, every constrained subgroup on a task's path from the root (outermost first) gets one
domain of its own, chosen when the first of its tasks is placed in this attempt, by the same rules as the
job's (levels from preferred up to required, domains that can hold the subgroup's tasks of this attempt,
less free capacity first, running pods of the subgroup kept inside under a required level, the preferred
sub-domain with the most free capacity). The choice is greedy: a subgroup placed earlier in the attempt is
not moved to make room for a later one (the attempt then fails as a whole and is rolled back). A subgroup
with no domain fails the attempt with KAI's message "topology <t>, requirement <level> couldn't be satisfied
for job <ns/name>, subgroup <s>: not enough resources in <domain> to allocate the job".
"""

from __future__ import annotations

from collections.abc import Callable

from shoal.core import topology as tas
from shoal.core.context import Context
from shoal.core.model import SubGroup
from shoal.core.placement import NodeFilter
from shoal.core.session import Job, NodeState, Task

AllocateJob = Callable[[Context, Job, list[Task]], bool]


def constrained(job: Job) -> bool:
    return any(s.required_level or s.preferred_level for s in job.group.subgroups)


def _path_up(job: Job, leaf: str) -> list[SubGroup]:
    """The subgroups from `leaf` up to the root."""
    by_name = {s.name: s for s in job.group.subgroups}
    out: list[SubGroup] = []
    current = by_name.get(leaf)
    while current is not None and current not in out:
        out.append(current)
        current = by_name.get(current.parent) if current.parent else None
    return out


def _path(job: Job, leaf: str) -> list[SubGroup]:
    """The constrained subgroups from the root down to `leaf` (outermost first)."""
    return [s for s in reversed(_path_up(job, leaf)) if s.required_level or s.preferred_level]


def _under(job: Job, task: Task, name: str) -> bool:
    return task.leaf is not None and any(s.name == name for s in _path_up(job, task.leaf.name))


class SubGroupDomains(NodeFilter):
    """`base` (the job's domain, or every node) narrowed to the domain of each constrained subgroup above a
    task; `failure` holds the reason when a subgroup has none."""

    def __init__(self, ctx: Context, job: Job, tasks: list[Task], base: NodeFilter) -> None:
        super().__init__(base.session)
        self.ctx, self.job, self.tasks, self.base = ctx, job, tasks, base
        self.chosen: dict[str, NodeFilter | None] = {}
        self.failure: str | None = None

    def candidates(self, task: Task) -> tuple[list[NodeState], dict[str, int]]:
        self.rankings = {}  # tasks of different subgroups see different nodes: rank afresh
        current = self.base
        for sub in _path(self.job, task.leaf.name if task.leaf is not None else ""):
            if sub.name not in self.chosen:
                self.chosen[sub.name] = self._choose(sub, current)
            narrowed = self.chosen[sub.name]
            if narrowed is None:
                return [], self.base.candidates(task)[1]
            current = narrowed
        return current.candidates(task)

    def _choose(self, sub: SubGroup, within: NodeFilter) -> NodeFilter | None:
        ctx, job = self.ctx, self.job
        name = sub.topology or job.group.topology or ""
        topo = next((t for t in ctx.session.snapshot.topologies if t.name == name), None)
        if topo is None:
            self.failure = self.failure or tas.missing_topology(name)
            return None
        required = tas.level_index(topo, sub.required_level) if sub.required_level else None
        preferred = tas.level_index(topo, sub.preferred_level) if sub.preferred_level else None
        for given, index in ((sub.required_level, required), (sub.preferred_level, preferred)):
            if given and index is None:
                self.failure = self.failure or tas.missing_level(given, topo.name)
                return None
        mine = [t for t in self.tasks if _under(job, t, sub.name)]
        if not mine:  # nothing of this subgroup is placed in this attempt
            return within
        running = [t for t in job.tasks if t not in self.tasks and _under(job, t, sub.name)]
        low = preferred if preferred is not None else required if required is not None else len(topo.levels) - 1
        high = required if required is not None else 0
        saved = ctx.nodes
        ctx.nodes = within
        try:
            domains = tas.domains_for(ctx, mine, running, topo, low, min(high, low), required)
            if required is None:
                members = [ns for ns in within.candidates(mine[0])[0] if tas.node_domain(ns, topo, 0) is not None]
                domains.append((-1, members, ()))
        finally:
            ctx.nodes = saved
        if not domains:
            requirement = sub.required_level or sub.preferred_level or ""
            self.failure = self.failure or tas.unsatisfied(topo.name, requirement, f"{job.key}, subgroup {sub.name}",
                                                           tas.lowest_common(ctx, topo, within.candidates(mine[0])[0]))
            return None
        _, members, _ = domains[0]
        return tas.DomainFilter(within, {ns.index for ns in members}, topo, preferred)


def wrap(ctx: Context, job: Job, tasks: list[Task], base: NodeFilter) -> NodeFilter:
    """`base` with the job's subgroup constraints applied (itself when there are none)."""
    return SubGroupDomains(ctx, job, tasks, base) if constrained(job) else base


def allocate_within(ctx: Context, job: Job, tasks: list[Task], allocate_job: AllocateJob) -> bool:
    """`allocate_job` with each constrained subgroup kept inside its own domain; a subgroup without one
    records the topology reason."""
    if not constrained(job):
        return allocate_job(ctx, job, tasks)
    base = ctx.nodes
    narrowed = SubGroupDomains(ctx, job, tasks, base)
    ctx.nodes = narrowed
    ctx.statement.fail_cache.clear()
    try:
        placed = allocate_job(ctx, job, tasks)
    finally:
        ctx.nodes = base
        ctx.statement.fail_cache.clear()
    if not placed and narrowed.failure:
        ctx.outcome(job).refuse(tas.TOPOLOGY_PLACEMENT, narrowed.failure)
    return placed

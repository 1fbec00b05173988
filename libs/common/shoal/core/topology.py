"""Topology-aware placement (KAI §6.1): required and preferred levels, domain order, preferred scoring.

A `Topology` (snapshot.topologies) names node-label levels, top to bottom. A node's domain at level i
is the tuple of its label values for levels 0..i; nodes missing a label of the topology are not part
of its tree. A job's constraint (PodGroup topology / required_level / preferred_level; a level is
named by its node label or its alias):

1. Unknown topology -> "Requested topology <t> does not exist". Unknown required (or preferred) level ->
   "topology constraint error: workload specified '<x>' as the required topology constraint level, but
   the topology tree '<t>' does not contain a level with this name".
2. Relevant levels run from the preferred level (else the required level) up to the required level
   (else the root). Domains at those levels that can hold the tasks being placed are kept; when the
   job already runs pods and has a required level, only domains holding all of them are kept.
3. Domains are tried in order of LESS free capacity first (bin-packing of domains), then deeper level
   first, then name: each becomes the node set of one all-or-nothing attempt (allocate's own
   checkpoint/rollback).
4. Inside a domain with a preferred level, each task goes to the preferred sub-domain with the MOST
   free capacity that can take it (ties by name): pods cluster together.
5. No domain can hold the tasks -> "topology <t>, requirement <req> couldn't be satisfied for job
   <ns/name>: not enough resources in <domain> to allocate the job" (<domain> is the lowest domain
   holding every node of the topology as "<level>=<value>", or "the cluster").

Capacity is counted per node as the number of the job's (first) task that fit in idle + releasing
resources: whole GPUs, CPU and memory; free capacity of a domain is its idle + releasing GPUs (CPU for
CPU-only jobs). Subgroup constraints are applied inside the job's domain (subgroup_topology.py). The eviction actions (reclaim,
preempt, consolidation) place a constrained preemptor through `domain_filters`, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable

from shoal.core import reasons
from shoal.core.context import Context
from shoal.core.model import Topology
from shoal.core.placement import NodeFilter
from shoal.core.session import Job, NodeState, Task

TOPOLOGY_PLACEMENT = reasons.POD_SCHEDULING_ERRORS


def missing_topology(name: str) -> str:
    return f"Requested topology {name} does not exist"


def missing_level(level: str, topology: str) -> str:
    return (
        f"topology constraint error: workload specified '{level}' as the required topology constraint level, "
        f"but the topology tree '{topology}' does not contain a level with this name"
    )


def unsatisfied(topology: str, requirement: str, job_key: str, domain: str) -> str:
    where = "the cluster" if not domain else domain
    return (
        f"topology {topology}, requirement {requirement} couldn't be satisfied for job {job_key}: "
        f"not enough resources in {where} to allocate the job"
    )


def constraint_of(job: Job) -> tuple[str, str | None, str | None] | None:
    """The job's own constraint (subgroups' constraints: subgroup_topology.py)."""
    g = job.group
    if g.topology:
        return g.topology, g.required_level, g.preferred_level
    return None


def level_index(topology: Topology, name: str) -> int | None:
    for i, (label, alias) in enumerate(zip(topology.levels, topology.aliases or ("",) * len(topology.levels),
                                           strict=False)):
        if name in (label, alias):
            return i
    return None


def node_domain(ns: NodeState, topology: Topology, depth: int) -> tuple[str, ...] | None:
    values = []
    for label in topology.levels[: depth + 1]:
        value = ns.node.labels.get(label)
        if value is None:
            return None
        values.append(value)
    return tuple(values)


def _fit_count(ns: NodeState, task: Task) -> int:
    counts = []
    if task.gpus:
        counts.append(max(ns.idle_gpus + ns.rel_gpus, 0) // task.gpus)
    if task.cpu:
        counts.append(max(ns.idle_cpu + ns.rel_cpu, 0) // task.cpu)
    if task.mem:
        counts.append(max(ns.idle_mem + ns.rel_mem, 0) // task.mem)
    counts.append(max(ns.idle_pods + ns.rel_pods, 0))
    return min(counts)


def _free(nodes: list[NodeState], task: Task) -> int:
    if task.gpus or task.is_fraction:
        return sum(max(ns.idle_gpus + ns.rel_gpus, 0) for ns in nodes)
    return sum(max(ns.idle_cpu + ns.rel_cpu, 0) for ns in nodes)


class DomainFilter(NodeFilter):
    """The base filter restricted to one domain; with a preferred level, to its best sub-domain."""

    def __init__(self, base: NodeFilter, members: set[int], topology: Topology, preferred: int | None) -> None:
        super().__init__(base.session)
        self.base = base
        self.members = members
        self.topology = topology
        self.preferred = preferred

    def candidates(self, task: Task) -> tuple[list[NodeState], dict[str, int]]:
        nodes, counts = self.base.candidates(task)
        inside = [ns for ns in nodes if ns.index in self.members]
        self.rankings = {}  # the set changes as tasks land: rank afresh
        if self.preferred is None:
            return inside, counts
        groups: dict[tuple[str, ...], list[NodeState]] = {}
        for ns in inside:
            key = node_domain(ns, self.topology, self.preferred)
            if key is not None:
                groups.setdefault(key, []).append(ns)
        ranked = sorted(groups.items(), key=lambda kv: (-_free(kv[1], task), kv[0]))
        for _, members in ranked:
            if any(_fit_count(ns, task) > 0 for ns in members):
                return members, counts
        return inside, counts


def _domains(ctx: Context, job: Job, tasks: list[Task], topology: Topology, low: int, high: int,
             required: int | None) -> list[tuple[int, list[NodeState], tuple[str, ...]]]:
    return domains_for(ctx, tasks, [t for t in job.tasks if t not in tasks], topology, low, high, required)


def domains_for(ctx: Context, tasks: list[Task], others: list[Task], topology: Topology, low: int, high: int,
                required: int | None) -> list[tuple[int, list[NodeState], tuple[str, ...]]]:
    """The domains that can hold `tasks`, in trial order; under a required level only those holding every
    placed task of `others` (the rest of the job or subgroup)."""
    cands, _ = ctx.nodes.candidates(tasks[0])
    running = [t.node for t in others if t.node is not None]
    out = []
    for depth in range(low, high - 1, -1):
        groups: dict[tuple[str, ...], list[NodeState]] = {}
        for ns in cands:
            key = node_domain(ns, topology, depth)
            if key is not None:
                groups.setdefault(key, []).append(ns)
        for key, members in groups.items():
            if required is not None and running:
                names = {ns.name for ns in members}
                if any(n.name not in names for n in running):
                    continue
            if sum(_fit_count(ns, tasks[0]) for ns in members) < len(tasks):
                continue
            if _free(members, tasks[0]) < sum(t.gpus for t in tasks):
                continue
            out.append((depth, members, key))
    out.sort(key=lambda d: (_free(d[1], tasks[0]), -d[0], d[2]))
    return out


def lowest_common(ctx: Context, topology: Topology, among: list[NodeState] | None = None) -> str:
    """The lowest domain holding every node of the topology (of `among`, when given)."""
    nodes = [ns for ns in (ctx.session.nodes if among is None else among)
             if node_domain(ns, topology, len(topology.levels) - 1) is not None]
    common = ""
    for depth, label in enumerate(topology.levels):
        values = {node_domain(ns, topology, depth) for ns in nodes}
        domain = next(iter(values)) if len(values) == 1 and nodes else None
        if domain is None:
            break
        common = f"{label}={domain[-1]}"
    return common


AllocateJob = Callable[[Context, Job, list[Task]], bool]


def allocate_in_domains(ctx: Context, job: Job, tasks: list[Task], allocate_job: AllocateJob) -> bool:
    """Allocate `job` inside the first topology domain that takes it (see the module docstring)."""
    name, required_name, preferred_name = constraint_of(job) or ("", None, None)
    topology = next((t for t in ctx.session.snapshot.topologies if t.name == name), None)
    out = ctx.outcome(job)
    if topology is None:
        out.refuse(TOPOLOGY_PLACEMENT, missing_topology(name))
        return False
    required = level_index(topology, required_name) if required_name else None
    preferred = level_index(topology, preferred_name) if preferred_name else None
    for given, index in ((required_name, required), (preferred_name, preferred)):
        if given and index is None:
            out.refuse(TOPOLOGY_PLACEMENT, missing_level(given, topology.name))
            return False
    low = preferred if preferred is not None else required if required is not None else len(topology.levels) - 1
    high = required if required is not None else 0
    domains = _domains(ctx, job, tasks, topology, low, min(high, low), required)
    if required is None:  # no required level: the whole topology is the last resort
        members = [ns for ns in ctx.nodes.candidates(tasks[0])[0] if node_domain(ns, topology, 0) is not None]
        domains.append((-1, members, ()))
    if not domains:
        requirement = required_name or preferred_name or ""
        out.refuse(TOPOLOGY_PLACEMENT, unsatisfied(topology.name, requirement, job.key, lowest_common(ctx, topology)))
        return False
    base = ctx.nodes
    try:
        for _, members, _ in domains:
            ctx.nodes = DomainFilter(base, {ns.index for ns in members}, topology, preferred)
            ctx.statement.fail_cache.clear()
            if allocate_job(ctx, job, tasks):
                return True
    finally:
        ctx.nodes = base
        ctx.statement.fail_cache.clear()
    return False


def domain_filters(ctx: Context, job: Job, tasks: list[Task]) -> list[NodeFilter]:
    """The node filters of the domains the job may use now, in order (eviction actions place the
    preemptor through them); empty when the constraint is invalid or no domain can hold the tasks."""
    name, required_name, preferred_name = constraint_of(job) or ("", None, None)
    topology = next((t for t in ctx.session.snapshot.topologies if t.name == name), None)
    if topology is None or not tasks:
        return []
    required = level_index(topology, required_name) if required_name else None
    preferred = level_index(topology, preferred_name) if preferred_name else None
    if (required_name and required is None) or (preferred_name and preferred is None):
        return []
    low = preferred if preferred is not None else required if required is not None else len(topology.levels) - 1
    high = required if required is not None else 0
    domains = _domains(ctx, job, tasks, topology, low, min(high, low), required)
    if required is None:
        members = [ns for ns in ctx.nodes.candidates(tasks[0])[0] if node_domain(ns, topology, 0) is not None]
        domains.append((-1, members, ()))
    return [DomainFilter(ctx.nodes, {ns.index for ns in m}, topology, preferred) for _, m, _ in domains]

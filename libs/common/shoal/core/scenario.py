"""One victim scenario on the cycle's reversible statement: what the eviction actions' solver builds on.

`Search` holds one job's search: it evicts chunks, places the job (anywhere, or only on some nodes through
`OnlyNodes`), re-places moved pods (consolidation), validates with the action's `accept`, and returns to
its start. `minimal` turns an accepted scenario into one with only the victims the placement needs (SPEC §4):
the chunks on the nodes the job uses (`needed`: a gang whose core is needed loses only its pods there when
it keeps its minimum, else all of them), the job placed on those nodes only, then chunks dropped one at a
time while the scenario still holds. Placement itself (`place_tasks`, all or nothing, topology domains in
order; pipelined whole while a gang is below its minimum) lives here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from shoal.core import subgroup_topology, topology
from shoal.core.context import Context
from shoal.core.ordering import is_satisfied
from shoal.core.placement import NodeFilter, find_node, static_signature
from shoal.core.session import Job, NodeState, Task
from shoal.core.statement import Change
from shoal.core.victim_gate import Feasible
from shoal.core.victims import Chunk


def place_tasks(ctx: Context, job: Job, tasks: list[Task]) -> list[Change] | None:
    """Place every task (all or nothing) on the statement; the new ops, or None (rolled back).
    A topology-constrained job is placed inside one of its domains (topology.py), tried in order, and each
    constrained subgroup inside a domain of its own (subgroup_topology.py)."""
    base = ctx.nodes
    if topology.constraint_of(job) is None:
        try:
            ctx.nodes = subgroup_topology.wrap(ctx, job, tasks, base)
            return _place_on(ctx, job, tasks)
        finally:
            ctx.nodes = base
    try:
        for nodes in topology.domain_filters(ctx, job, tasks):
            ctx.nodes = subgroup_topology.wrap(ctx, job, tasks, nodes)
            got = _place_on(ctx, job, tasks)
            if got is not None:
                return got
    finally:
        ctx.nodes = base
    return None


def _place_on(ctx: Context, job: Job, tasks: list[Task]) -> list[Change] | None:
    stmt = ctx.statement
    cp = stmt.checkpoint()
    was_satisfied = is_satisfied(job.root)
    below_min_pipelined = False
    for task in tasks:
        spot = find_node(ctx.session, ctx.nodes, task)
        if spot is None:
            stmt.rollback(cp)
            return None
        if spot.pipelined:
            stmt.pipeline(task, spot.node, spot.picks)
            below_min_pipelined = below_min_pipelined or not was_satisfied
        else:
            stmt.allocate(task, spot.node, spot.picks)
    ops = stmt.log[cp:]
    if below_min_pipelined:
        stmt.convert_to_pipelined(list(ops))
    return list(stmt.log[cp:])


def replace_evicted(ctx: Context, chunks: list[Chunk]) -> list[Change] | None:
    """Consolidation: re-place every evicted pod (pipelined); None (rolled back) if one has no node."""
    stmt = ctx.statement
    cp = stmt.checkpoint()
    for chunk in chunks:
        for task in chunk.tasks:
            spot = find_node(ctx.session, ctx.nodes, task)
            if spot is None:
                stmt.rollback(cp)
                return None
            stmt.pipeline(task, spot.node, spot.picks)
    return list(stmt.log[cp:])


class OnlyNodes(NodeFilter):
    """The action's node filter limited to some nodes (where a scenario's victims may be kept)."""

    def __init__(self, base: NodeFilter, members: set[int], feasible: Feasible) -> None:
        super().__init__(base.session)
        self.base = base
        self.members = sorted(members)
        self.feasible = feasible

    def candidates(self, task: Task) -> tuple[list[NodeState], dict[str, int]]:
        sig = static_signature(task)
        hit = self._cache.get(sig)
        if hit is None:
            allowed = self.feasible.of(task)
            every = self.session.nodes
            hit = self._cache[sig] = ([every[i] for i in self.members if i in allowed], {})
        return hit


Accept = Callable[[list[Chunk]], bool]
MessageOf = Callable[[Task], str]


class Search:
    """One job's victim search: what `solve` needs besides the chunks, and the statement's start."""

    __slots__ = ("ctx", "job", "tasks", "accept", "action", "message_of", "replace", "cp", "base", "feasible",
                 "placed_at")

    def __init__(self, ctx: Context, job: Job, tasks: list[Task], accept: Accept, action: str,
                 message_of: MessageOf, replace: bool, feasible: Feasible) -> None:
        self.ctx, self.job, self.tasks, self.accept = ctx, job, tasks, accept
        self.action, self.message_of, self.replace = action, message_of, replace
        self.cp = ctx.statement.checkpoint()
        self.base = ctx.nodes
        self.feasible = feasible
        self.placed_at = self.cp

    def only(self, nodes: set[int]) -> OnlyNodes:
        return OnlyNodes(self.base, nodes, self.feasible)

    def evict(self, chunks: Iterable[Chunk]) -> None:
        for chunk in chunks:
            for t in chunk.tasks:
                self.ctx.statement.evict(t, self.action, self.job.key, self.message_of(t))

    def restart(self, chunks: list[Chunk]) -> None:
        """Back to the search's start with exactly `chunks` evicted."""
        self.ctx.statement.rollback(self.cp)
        self.evict(chunks)

    def scenario(self, chunks: list[Chunk], nodes: NodeFilter | None = None, place_only: bool = False) -> bool:
        """With `chunks` evicted: place the job (on `nodes`, else anywhere), re-place the moved pods
        (consolidation) anywhere, validate (`place_only`: just place the job, consolidation's first
        step, whose moves are then pruned to the nodes it uses). Rolls back to the evictions on failure."""
        ctx, stmt = self.ctx, self.ctx.statement
        cp = self.placed_at = stmt.checkpoint()
        ctx.nodes = nodes or self.base
        try:
            placed = place_tasks(ctx, self.job, self.tasks)
        finally:
            ctx.nodes = self.base
        if placed is None:
            return False
        if place_only:
            return True
        if self.replace and replace_evicted(ctx, chunks) is None:
            stmt.rollback(cp)
            return False
        if not self.accept(chunks):
            stmt.rollback(cp)
            return False
        return True

    def unplace(self) -> None:
        """Undo the last accepted scenario's placement, keeping its evictions."""
        self.ctx.statement.rollback(self.placed_at)

    def used_nodes(self) -> set[int]:
        """Nodes where the job's tasks are placed in the current scenario."""
        job = self.job
        return {op.node.index for op in self.ctx.statement.log[self.cp:]
                if op.kind in ("allocate", "pipeline") and op.task.job is job}


def needed(chunks: list[Chunk], used: set[int]) -> list[Chunk]:
    """The victims a placement on the `used` nodes needs: the chunks with a pod there; for a job whose
    core is among them, only its pods on those nodes when the job keeps its minimum without them (a job
    without subgroups), else all of its pods (a gang never stays below its minimum)."""
    by_job: dict[int, list[Chunk]] = {}
    for c in chunks:
        by_job.setdefault(id(c.job), []).append(c)
    out: list[Chunk] = []
    for cs in by_job.values():
        hit = [c for c in cs if any(ns.index in used for ns in c.nodes)]
        if not hit:
            continue
        if not any(c.core for c in hit):
            out.extend(hit)
            continue
        job = cs[0].job
        on = [(t, ns) for c in cs for t, ns in zip(c.tasks, c.homes, strict=True) if ns.index in used]
        running = sum(len(c.tasks) for c in cs)
        if not job.root.children and running - len(on) >= (job.root.min_member or 0):
            out.append(Chunk(job, [t for t, _ in on], core=False, homes=[ns for _, ns in on]))
        else:
            out.extend(cs)
    return out


TRIM_TRIALS = 48  # at most this many single-chunk removals are tried on an accepted scenario


def minimal(search: Search, taken: list[Chunk], on_victims: bool = False) -> list[Chunk] | None:
    """From an accepted scenario with `taken` evicted: only the victims the placement needs (SPEC §4).

    Keep the chunks on the nodes the job uses (`needed`) and place the job on those nodes only; then
    try dropping chunks one at a time, last taken first, while the scenario still holds. If the victims
    on the used nodes do not make a valid scenario (the others were needed only for the queue figures),
    the job is placed on the victims' nodes instead and pruned again. On success the statement holds
    the minimal scenario; on failure (None) it holds `taken` evicted and nothing placed.
    """
    for nodes in (None,) if on_victims else (None, victim_nodes(search, taken)):
        if nodes is not None:
            search.restart(taken)
            if not search.scenario(taken, nodes):
                continue
        got = _prune(search, taken)
        if got is not None:
            return got
    search.restart(taken)
    return None


def movable(ctx: Context, chunks: list[Chunk]) -> bool:
    """Every pod of `chunks` fits some node on its own now (a necessary condition for moving them)."""
    return all(find_node(ctx.session, ctx.nodes, t) is not None for c in chunks for t in c.tasks)


def victim_nodes(search: Search, taken: list[Chunk]) -> OnlyNodes:
    return search.only({ns.index for c in taken for ns in c.nodes})


def _prune(search: Search, taken: list[Chunk]) -> list[Chunk] | None:
    used = search.used_nodes()
    keep = needed(taken, used)
    if len(keep) == len(taken) == 1 and not search.replace:
        return taken  # the accepted scenario stands as it is
    only = search.only(used)
    search.restart(keep)
    if not search.scenario(keep, only):
        return None
    trials = 0
    for chunk in reversed(list(keep)):
        if trials >= TRIM_TRIALS:
            break
        if not chunk.core and any(c.core and c.job is chunk.job for c in keep):
            continue  # an above-minimum pod stays with its gang's core
        trials += 1
        fewer = [c for c in keep if c is not chunk]
        search.restart(fewer)
        if search.scenario(fewer, only):
            keep = fewer
    search.restart(keep)
    if not search.scenario(keep, only):  # pragma: no cover - the last accepted set replays
        return None
    if _pods(needed(keep, search.used_nodes())) != _pods(keep):
        # pruning took out a gang's core, so a pod of that gang kept for it (off the job's nodes) is no
        # longer one its gang must lose: a victim nothing on those nodes needs (SPEC §4), so no scenario
        return None
    return keep


def _pods(chunks: list[Chunk]) -> set[int]:
    return {id(t) for c in chunks for t in c.tasks}

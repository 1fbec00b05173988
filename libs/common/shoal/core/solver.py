"""The shared victim-accumulating solver used by consolidation, reclaim and preempt (KAI §4.3–§4.5).

`solve` works on the cycle's reversible statement. It evicts victim chunks one at a time (in the order
the action gives) and, after each, tries to place the preemptor's tasks (allocated where they fit in
idle resources, pipelined onto releasing ones; a gang below its minimum that needed a pipelined task is
pipelined whole). Consolidation also re-places every evicted pod (pipelined) and accepts only when all of
them found a node. The action's `accept` validates the scenario; an accepted scenario is pruned of
victims whose nodes the placement did not use, then committed. A rejected scenario is rolled back, so
nothing of it leaks.

The search is bounded: every simulated chunk eviction spends one unit of the action's `Budget`
(`ShardConfig.victim_budget` per action and cycle). When it runs out the job being searched gets the
`VictimSearchBudgetExhausted` reason and the action stops; counters go to the cycle timings.

Placement attempts are skipped while they cannot succeed: until the idle + releasing GPUs of the
cluster cover the tasks' GPUs, and after a failed attempt until a node touched by a new victim can hold
one of the tasks (on other nodes nothing changed, and placement is deterministic).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from shoal.core import topology
from shoal.core.allocate import tasks_to_allocate
from shoal.core.context import Context
from shoal.core.limits import Excess
from shoal.core.minruntime import rfc3339
from shoal.core.model import ANNOTATION_LAST_EVICTION
from shoal.core.ordering import DEFAULT_POLICY, Policy, is_satisfied
from shoal.core.placement import NodeFilter, find_node, request_signature, static_signature
from shoal.core.plan import Annotate
from shoal.core.session import GATED, PENDING, Job, NodeState, SubGroupNode, Task
from shoal.core.statement import Op
from shoal.core.victim_gate import Feasible, helps, hosts, shapes
from shoal.core.victims import Chunk

VICTIM_BUDGET_EXHAUSTED = "VictimSearchBudgetExhausted"


def budget_message(action: str, spent: int) -> str:
    return (
        f"The {action} victim search stopped after simulating {spent} victims (victim budget); "
        f"it continues in the next cycle"
    )


def job_budget_message(action: str, spent: int) -> str:
    return (
        f"The {action} victim search for this job stopped after simulating {spent} victims (victim budget "
        f"per job); the other jobs were still searched and this one is searched again in the next cycle"
    )


def job_signature(job: Job, tasks: list[Task]) -> tuple:
    """KAI's scheduling signature: jobs alike in queue, priority and requests fail alike (§4.1)."""
    return (job.queue, job.priority, job.preemptible, tuple(sorted(request_signature(t) for t in tasks)))


class Budget:
    """Per action run: the victim budget, the budget of the job being searched, counters, the free-GPU
    gate, the static node sets and the failed-signature memo (a failed search is not repeated for an
    identical job until something is committed)."""

    def __init__(self, ctx: Context, action: str) -> None:
        cfg = ctx.session.config
        self.ctx = ctx
        self.action = action
        self.left = max(cfg.victim_budget, 0)
        self.per_job = max(cfg.victim_budget_per_job, 0)
        self.job_left = self.per_job
        self.job_spent = 0
        self.job_exhausted = False
        self.spent = 0
        self.exhausted = False
        self.failed: set[tuple] = set()
        self.depth = cfg.queue_depth_per_action.get(action)
        self.tried: dict[str, int] = {}
        self.free = FreeGpus(ctx)
        self.feasible = Feasible(ctx.nodes)

    def within_depth(self, job: Job) -> bool:
        """queueDepthPerAction: at most that many jobs per leaf queue are searched by this action."""
        if self.depth is None:
            return True
        seen = self.tried.get(job.queue, 0)
        if seen >= self.depth:
            return False
        self.tried[job.queue] = seen + 1
        return True

    def start_job(self) -> None:
        self.job_left = self.per_job
        self.job_spent = 0
        self.job_exhausted = False

    def skipped(self) -> None:
        key = f"{self.action}.victims_skipped"
        self.ctx.counters[key] = self.ctx.counters.get(key, 0) + 1

    def spend(self) -> bool:
        if self.left <= 0:
            if not self.exhausted:
                self.exhausted = True
                self.ctx.counters[f"{self.action}.budget_exhausted"] = 1
            return False
        if self.job_left <= 0:
            if not self.job_exhausted:
                self.job_exhausted = True
                key = f"{self.action}.job_budget_exhausted"
                self.ctx.counters[key] = self.ctx.counters.get(key, 0) + 1
            return False
        self.left -= 1
        self.job_left -= 1
        self.spent += 1
        self.job_spent += 1
        self.ctx.counters[f"{self.action}.victims_simulated"] = self.spent
        return True


def _ready(node: SubGroupNode) -> bool:
    if node.is_leaf:
        return sum(1 for t in node.tasks if t.status != GATED) >= (node.min_member or 0)
    required = len(node.children) if node.min_subgroup is None else node.min_subgroup
    return sum(1 for c in node.children if _ready(c)) >= required


def preemptor_candidates(ctx: Context) -> list[Job]:
    """Pending, ready jobs of leaf queues with valid requests (by key; the action orders them)."""
    out = []
    for job in ctx.session.pending_jobs:
        share = ctx.shares.get(job.queue)
        if share is None or not share.is_leaf:
            continue
        pending = [t for t in job.tasks if t.status == PENDING]
        if not pending or any(t.pod.fraction_error for t in pending):
            continue
        if _ready(job.root):
            out.append(job)
    return out


def next_tasks(job: Job, policy: Policy = DEFAULT_POLICY) -> list[Task]:
    return tasks_to_allocate(job.root, policy)


def place_tasks(ctx: Context, job: Job, tasks: list[Task]) -> list[Op] | None:
    """Place every task (all or nothing) on the statement; the new ops, or None (rolled back).
    A topology-constrained job is placed inside one of its domains (topology.py), tried in order."""
    if topology.constraint_of(job) is None:
        return _place_on(ctx, job, tasks)
    base = ctx.nodes
    try:
        for nodes in topology.domain_filters(ctx, job, tasks):
            ctx.nodes = nodes
            got = _place_on(ctx, job, tasks)
            if got is not None:
                return got
    finally:
        ctx.nodes = base
    return None


def _place_on(ctx: Context, job: Job, tasks: list[Task]) -> list[Op] | None:
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


def replace_evicted(ctx: Context, chunks: list[Chunk]) -> list[Op] | None:
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


class FreeGpus:
    """Idle + releasing GPUs over a task's candidate nodes, recomputed only after the nodes changed
    (the session's dirty-node log grew) or for another constraint signature."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.key: tuple | None = None
        self.value = 0

    def of(self, task: Task) -> int:
        key = (len(self.ctx.session.dirty), static_signature(task))
        if key != self.key:
            cands, _ = self.ctx.nodes.candidates(task)
            self.value = sum(max(ns.idle_gpus + ns.rel_gpus, 0) for ns in cands)
            self.key = key
        return self.value


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
    for nodes in (None,) if on_victims else (None, _victim_nodes(search, taken)):
        if nodes is not None:
            search.restart(taken)
            if not search.scenario(taken, nodes):
                continue
        got = _prune(search, taken)
        if got is not None:
            return got
    search.restart(taken)
    return None


def _movable(ctx: Context, chunks: list[Chunk]) -> bool:
    """Every pod of `chunks` fits some node on its own now (a necessary condition for moving them)."""
    return all(find_node(ctx.session, ctx.nodes, t) is not None for c in chunks for t in c.tasks)


def _victim_nodes(search: Search, taken: list[Chunk]) -> OnlyNodes:
    return search.only({ns.index for c in taken for ns in c.nodes})


def _prune(search: Search, taken: list[Chunk]) -> list[Chunk] | None:
    used = search.used_nodes()
    keep = needed(taken, used)
    if len(keep) == len(taken) and not _trimmable(keep) and not search.replace:
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
    return keep


def _trimmable(chunks: list[Chunk]) -> bool:
    return len(chunks) > 1


def solve(
    ctx: Context,
    job: Job,
    tasks: list[Task],
    chunks: Iterable[Chunk],
    accept: Accept,
    action: str,
    message_of: MessageOf,
    budget: Budget,
    replace: bool = False,
    excess: Excess | None = None,
) -> list[Chunk] | None:
    """Find victims for `job` (see the module docstring); the victims of the scenario left on the
    statement, or None (nothing left).

    When the scenario found takes whole gangs that mostly run elsewhere (gang-mates evicted off the
    job's nodes), the search runs once more without those gangs and keeps whichever evicts fewer pods."""
    seen: list[Chunk] = []

    def recorded(source: Iterable[Chunk]):
        for chunk in source:
            seen.append(chunk)
            yield chunk

    budget.start_job()
    stream = iter(chunks)
    search = Search(ctx, job, tasks, accept, action, message_of, replace, budget.feasible)
    got = _search(search, recorded(stream), budget, excess)
    if got is None or replace:
        return got
    used = search.used_nodes()
    spread = {id(c.job) for c in got if any(ns.index not in used for ns in c.nodes)}
    if not spread:
        return got
    ctx.statement.rollback(search.cp)
    skip = [c for c in seen if id(c.job) not in spread]
    rest = (c for c in stream if id(c.job) not in spread)
    again = Search(ctx, job, tasks, accept, action, message_of, replace, budget.feasible)
    other = _search(again, _chain(skip, rest), budget, excess)
    if other is not None and _pods(other) < _pods(got):
        return other
    ctx.statement.rollback(search.cp)
    search.restart(got)
    if not search.scenario(got, search.only(used)):  # pragma: no cover - the first scenario replays
        ctx.statement.rollback(search.cp)
        return None
    return got


def _chain(first: list[Chunk], then: Iterable[Chunk]):
    yield from first
    yield from then


def _pods(chunks: list[Chunk]) -> int:
    return sum(len(c.tasks) for c in chunks)


def _search(search: Search, chunks: Iterable[Chunk], budget: Budget, excess: Excess | None) -> list[Chunk] | None:
    """One pass of the victim search over `chunks` (see `solve`)."""
    ctx, tasks, replace = search.ctx, search.tasks, search.replace
    frees = excess.frees if excess else None
    by_node: dict[int, list[Chunk]] = {}  # over a limit: the taken chunks per node
    covering: set[int] = set()  # ... and the nodes whose own victims cover the excess
    tally = excess.left() if excess else {}  # ... and what all taken chunks still have to free
    whole_gpus = all(not t.is_fraction for t in tasks)
    need_gpus = sum(t.gpus for t in tasks)
    free = budget.free.of(tasks[0]) if whole_gpus and tasks else 0
    feasible = budget.feasible
    cands = feasible.of(tasks[0]) if tasks else frozenset()
    forms = shapes(tasks)
    taken: list[Chunk] = []
    for chunk in chunks:
        if not helps(chunk, forms, feasible, frees) or (replace and not _movable(ctx, [chunk])):
            budget.skipped()  # frees nothing the job lacks there, or (consolidation) a pod with nowhere to go
            continue
        if not budget.spend():
            break
        nodes = {ns.index: ns for ns in chunk.nodes if ns.index in cands}
        before = sum(max(ns.idle_gpus + ns.rel_gpus, 0) for ns in nodes.values())
        search.evict([chunk])
        taken.append(chunk)
        free += sum(max(ns.idle_gpus + ns.rel_gpus, 0) for ns in nodes.values()) - before
        if whole_gpus and free < need_gpus:
            continue
        if excess:  # over a limit: only victims on the job's nodes lower it, so place it there
            for ns in chunk.nodes:
                by_node.setdefault(ns.index, []).append(chunk)
            if len(tasks) == 1:  # one pod: its node's own victims must cover the excess
                spots = {ns.index for ns in chunk.nodes if excess.covered(by_node[ns.index])}
                if not spots:  # the covering nodes did not change: the last try stands
                    continue
                covering.update(spots)
                nodes_for = search.only(covering)
            else:
                excess.take(tally, chunk)
                if not excess.done(tally) or not hosts(chunk, forms, feasible):
                    continue
                nodes_for = _victim_nodes(search, taken)
            if search.scenario(taken, nodes_for):
                if excess.covered(needed(taken, search.used_nodes())):
                    got = minimal(search, taken, on_victims=True)
                    if got is not None:
                        return got
                else:
                    search.unplace()
            continue
        if not hosts(chunk, forms, feasible):  # nothing new to place on: the job did not fit before
            continue
        if search.scenario(taken, place_only=replace):
            if replace and not _movable(ctx, needed(taken, search.used_nodes())):
                search.unplace()  # a pod it would move has no node even now: fewer victims give less room
                continue
            got = minimal(search, taken, on_victims=replace)
            if got is not None:
                return got
    ctx.statement.rollback(search.cp)
    return None


def commit(ctx: Context, job: Job, hidden: frozenset[int] = frozenset()) -> list[Op]:
    """Commit the statement: record the ops (minus pipelines of `hidden` tasks, which the plan must not
    carry: consolidation's moved pods are recreated by their controllers) and stamp the evictor's
    `kai.scheduler/last-eviction-timestamp`."""
    ops = [op for op in ctx.statement.commit() if op.kind != "convert"]
    ctx.accept(ops)
    if hidden:
        drop = {id(op) for op in ops if op.kind == "pipeline" and id(op.task) in hidden}
        ctx.accepted[:] = [op for op in ctx.accepted if id(op) not in drop]
        for key, job_ops in ctx.job_ops.items():
            if any(id(op) in drop for op in job_ops):
                ctx.job_ops[key] = [op for op in job_ops if id(op) not in drop]
    if any(op.kind == "evict" for op in ops):
        ctx.status_ops.append(
            Annotate(pod_group=job.key, key=ANNOTATION_LAST_EVICTION, value=rfc3339(ctx.session.now))
        )
    return ops

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
from shoal.core.minruntime import rfc3339
from shoal.core.model import ANNOTATION_LAST_EVICTION
from shoal.core.ordering import DEFAULT_POLICY, Policy, is_satisfied
from shoal.core.placement import find_node, request_signature, static_signature
from shoal.core.plan import Annotate
from shoal.core.session import GATED, PENDING, Job, NodeState, SubGroupNode, Task
from shoal.core.statement import Op
from shoal.core.victims import Chunk

VICTIM_BUDGET_EXHAUSTED = "VictimSearchBudgetExhausted"


def budget_message(action: str, spent: int) -> str:
    return (
        f"The {action} victim search stopped after simulating {spent} victims (victim budget); "
        f"it continues in the next cycle"
    )


def job_signature(job: Job, tasks: list[Task]) -> tuple:
    """KAI's scheduling signature: jobs alike in queue, priority and requests fail alike (§4.1)."""
    return (job.queue, job.priority, job.preemptible, tuple(sorted(request_signature(t) for t in tasks)))


class Budget:
    """Per action run: the victim budget, counters, the free-GPU gate and the failed-signature memo
    (a failed search is not repeated for an identical job until something is committed)."""

    def __init__(self, ctx: Context, action: str) -> None:
        self.ctx = ctx
        self.action = action
        self.left = max(ctx.session.config.victim_budget, 0)
        self.spent = 0
        self.exhausted = False
        self.failed: set[tuple] = set()
        self.depth = ctx.session.config.queue_depth_per_action.get(action)
        self.tried: dict[str, int] = {}
        self.free = FreeGpus(ctx)

    def within_depth(self, job: Job) -> bool:
        """queueDepthPerAction: at most that many jobs per leaf queue are searched by this action."""
        if self.depth is None:
            return True
        seen = self.tried.get(job.queue, 0)
        if seen >= self.depth:
            return False
        self.tried[job.queue] = seen + 1
        return True

    def spend(self) -> bool:
        if self.left <= 0:
            if not self.exhausted:
                self.exhausted = True
                self.ctx.counters[f"{self.action}.budget_exhausted"] = 1
            return False
        self.left -= 1
        self.spent += 1
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


def _fits_node(ns: NodeState, task: Task) -> bool:
    return (
        task.gpus <= ns.idle_gpus + ns.rel_gpus
        and task.cpu <= ns.idle_cpu + ns.rel_cpu
        and task.mem <= ns.idle_mem + ns.rel_mem
    )


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


Accept = Callable[[list[Chunk]], bool]
MessageOf = Callable[[Task], str]


def _evict(ctx: Context, chunk: Chunk, action: str, by: str, message_of: MessageOf) -> None:
    for t in chunk.tasks:
        ctx.statement.evict(t, action, by, message_of(t))


def _scenario(ctx: Context, job: Job, tasks: list[Task], chunks: list[Chunk], accept: Accept,
              replace: bool) -> bool:
    """With `chunks` already evicted: place, re-place (consolidation), validate. Rolls back on failure."""
    stmt = ctx.statement
    cp = stmt.checkpoint()
    if place_tasks(ctx, job, tasks) is None:
        return False
    if replace and replace_evicted(ctx, chunks) is None:
        stmt.rollback(cp)
        return False
    if not accept(chunks):
        stmt.rollback(cp)
        return False
    return True


def _used_nodes(ops: list[Op]) -> set[str]:
    return {op.node.name for op in ops if op.kind in ("allocate", "pipeline")}


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
) -> list[Chunk] | None:
    """Find victims for `job` (see the module docstring); the committed victims, or None."""
    stmt = ctx.statement
    cp = stmt.checkpoint()
    by = job.key
    whole_gpus = all(not t.is_fraction for t in tasks)
    need_gpus = sum(t.gpus for t in tasks)
    free = budget.free.of(tasks[0]) if whole_gpus and tasks else 0
    taken: list[Chunk] = []
    failed_once = False
    for chunk in chunks:
        if not budget.spend():
            stmt.rollback(cp)
            return None
        _evict(ctx, chunk, action, by, message_of)
        taken.append(chunk)
        free += sum(t.gpus for t in chunk.tasks)
        if whole_gpus and free < need_gpus:
            continue
        if failed_once and whole_gpus:
            nodes = [t.node for t in chunk.tasks if t.node is not None]
            if not any(_fits_node(ns, t) for ns in nodes for t in tasks):
                continue
        if _scenario(ctx, job, tasks, taken, accept, replace):
            return _prune(ctx, job, tasks, taken, accept, action, message_of, replace, cp)
        failed_once = True
    stmt.rollback(cp)
    return None


def _prune(ctx: Context, job: Job, tasks: list[Task], taken: list[Chunk], accept: Accept, action: str,
           message_of: MessageOf, replace: bool, cp: int) -> list[Chunk] | None:
    """Drop victims whose nodes the accepted placement does not use; keep the scenario if that fails."""
    stmt = ctx.statement
    used = _used_nodes(stmt.log[cp:])
    needed = [c for c in taken if any(t.node is not None and t.node.name in used for t in c.tasks)]
    whole = {id(c.job) for c in needed if c.core}  # a job's core goes only with all of its pods
    needed = [c for c in taken if c in needed or id(c.job) in whole]
    if replace or len(needed) == len(taken):
        return taken
    stmt.rollback(cp)
    for chunk in needed:
        _evict(ctx, chunk, action, job.key, message_of)
    if _scenario(ctx, job, tasks, needed, accept, replace):
        return needed
    stmt.rollback(cp)
    for chunk in taken:
        _evict(ctx, chunk, action, job.key, message_of)
    if not _scenario(ctx, job, tasks, taken, accept, replace):  # pragma: no cover - deterministic replay
        stmt.rollback(cp)
        return None
    return taken


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

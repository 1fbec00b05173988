"""The shared victim-accumulating solver used by consolidation, reclaim and preempt (KAI §4.3–§4.5).

`solve` works on the cycle's reversible statement. It evicts victim chunks one at a time, in the order the
action gives, and tries to place the preemptor's tasks after a chunk that can matter; an accepted scenario
is reduced to only the victims the placement needs (scenario.minimal, SPEC §4) and left on the statement
for the action to commit. A rejected scenario is rolled back, so nothing of it leaks.

Before a chunk is simulated (victim_gate.py): it must free, on one of its nodes, something a preemptor task
lacks there (GPUs or a shared GPU's portion, CPU, memory, a pod slot), or lower a queue that is over its
limit (limits.py); consolidation also skips pods that have nowhere to move. A placement is tried only
after a chunk whose node can now take a preemptor task and, for whole-GPU tasks, once the idle +
releasing GPUs of the candidate nodes (recounted from the simulation, so a shared GPU emptied of its
fractional pods counts) cover the request. A job over a queue limit is placed on its victims' nodes
(for one pod: a node whose own victims cover the excess). When the scenario found takes whole gangs
that mostly run elsewhere, the search runs once more without them and keeps whichever evicts fewer pods.
Before any victim, a job that has victim candidates is tried on what the cycle's earlier scenarios freed
(releasing capacity); a job with no candidate at all is not searched (reclaim/preempt return first).

The search is bounded: every simulated chunk spends one unit of the action's `Budget`
(`ShardConfig.victim_budget` per action and cycle) and of the job's (`victim_budget_per_job`). A job that
spends its own budget gets `VictimSearchBudgetExhausted` and the next jobs are still tried; when the
action's budget runs out the job being searched gets it and the action stops. Counters (victims
simulated / skipped, budget stops) go to the cycle timings.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import chain

from shoal.core import bindbackoff
from shoal.core.allocate import tasks_to_allocate
from shoal.core.context import Context
from shoal.core.limits import Excess
from shoal.core.model import ANNOTATION_LAST_EVICTION
from shoal.core.ordering import DEFAULT_POLICY, Policy
from shoal.core.placement import request_signature, static_signature
from shoal.core.plan import Annotate
from shoal.core.scenario import Accept, MessageOf, Search, minimal, movable, needed, victim_nodes
from shoal.core.session import GATED, PENDING, Job, SubGroupNode, Task
from shoal.core.sharing_mode import request_error
from shoal.core.statement import Change
from shoal.core.timetext import rfc3339
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
        self.quiet = False  # a retry's budget stop is not reported
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

    @contextmanager
    def retry(self) -> Iterator[None]:
        """A second pass for the same job: its budget is what the first pass spent, and running out
        of it is not reported (the first pass found a scenario, which stands)."""
        self.job_left = min(self.job_left, self.job_spent)
        self.quiet = True
        try:
            yield
        finally:
            self.quiet = False
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
            if not self.job_exhausted and not self.quiet:
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
        mode = ctx.session.config.gpu_sharing_mode
        if not pending or any(request_error(t.pod, mode) for t in pending):
            continue
        if _ready(job.root) and not bindbackoff.backing_off(job, ctx):
            out.append(job)
    return out


def next_tasks(job: Job, policy: Policy = DEFAULT_POLICY) -> list[Task]:
    return tasks_to_allocate(job.root, policy)


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
    with budget.retry():  # at most what the first pass spent; running out here stops nothing
        other = _search(again, chain(skip, rest), budget, excess)
    if other is not None and _pods(other) < _pods(got):
        return other
    ctx.statement.rollback(search.cp)
    search.restart(got)
    if not search.scenario(got, search.only(used)):  # pragma: no cover - the first scenario replays
        ctx.statement.rollback(search.cp)
        return None
    return got


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
    forms = shapes(tasks, feasible)
    taken: list[Chunk] = []
    passed: dict[int, list[Chunk]] = {}  # above-minimum chunks skipped, per victim job
    if not excess and search.scenario([]):  # onto what earlier scenarios of the cycle freed: no victim
        return []
    for chunk in chunks:
        if not helps(chunk, forms, frees) or (replace and not movable(ctx, [chunk])):
            budget.skipped()  # frees nothing the job lacks there, or (consolidation) a pod with nowhere to go
            if not chunk.core:
                passed.setdefault(id(chunk.job), []).append(chunk)
            continue
        # a gang's core goes only with every pod above its minimum: the ones passed over go first
        group = [*passed.pop(id(chunk.job), ()), chunk] if chunk.core else [chunk]
        if not all(budget.spend() for _ in group):
            break
        nodes = {ns.index: ns for c in group for ns in c.nodes if ns.index in cands}
        before = sum(max(ns.idle_gpus + ns.rel_gpus, 0) for ns in nodes.values())
        search.evict(group)
        taken.extend(group)
        free += sum(max(ns.idle_gpus + ns.rel_gpus, 0) for ns in nodes.values()) - before
        if whole_gpus and free < need_gpus:
            continue
        if excess:  # over a limit: only victims on the job's nodes lower it, so place it there
            for c in group:
                for ns in c.nodes:
                    by_node.setdefault(ns.index, []).append(c)
            if len(tasks) == 1:  # one pod: its node's own victims must cover the excess
                spots = {ns.index for c in group for ns in c.nodes if excess.covered(by_node[ns.index])}
                if not spots:  # the covering nodes did not change: the last try stands
                    continue
                covering.update(spots)
                nodes_for = search.only(covering)
            else:
                for c in group:
                    excess.take(tally, c)
                if not excess.done(tally) or not any(hosts(c, forms) for c in group):
                    continue
                nodes_for = victim_nodes(search, taken)
            if search.scenario(taken, nodes_for):
                if excess.covered(needed(taken, search.used_nodes())):
                    got = minimal(search, taken, on_victims=True)
                    if got is not None:
                        return got
                else:
                    search.unplace()
            continue
        if not any(hosts(c, forms) for c in group):  # nothing new to place on: it did not fit before
            continue
        if search.scenario(taken, place_only=replace):
            if replace and not movable(ctx, needed(taken, search.used_nodes())):
                search.unplace()  # a pod it would move has no node even now: fewer victims give less room
                continue
            got = minimal(search, taken, on_victims=replace)
            if got is not None:
                return got
    ctx.statement.rollback(search.cp)
    return None


def commit(ctx: Context, job: Job, hidden: frozenset[int] = frozenset()) -> list[Change]:
    """Commit the statement: record the ops (minus pipelines of `hidden` tasks, which the plan must not
    carry: consolidation's moved pods are recreated by their controllers) and stamp the evictor's
    `kai.scheduler/last-eviction-timestamp`."""
    ops = [op for op in ctx.statement.commit() if op.kind != "convert"]
    ctx.accept(ops)
    if hidden:
        moved = [op for op in ops if op.kind == "pipeline" and id(op.task) in hidden]
        ctx.moved.extend(moved)
        drop = {id(op) for op in moved}
        ctx.accepted[:] = [op for op in ctx.accepted if id(op) not in drop]
        for key, job_ops in ctx.job_ops.items():
            if any(id(op) in drop for op in job_ops):
                ctx.job_ops[key] = [op for op in job_ops if id(op) not in drop]
    if any(op.kind == "evict" for op in ops):
        ctx.status_ops.append(
            Annotate(pod_group=job.key, key=ANNOTATION_LAST_EVICTION, value=rfc3339(ctx.session.now))
        )
    return ops

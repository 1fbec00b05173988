"""The reclaim action (KAI §4.4): a queue below its fair share takes resources back from other queues.

Pending jobs are taken in allocate's queue/job order. A job is skipped when it is inside its preemption
delay (reason PreemptionDelayNotElapsed), fails the queue capacity checks (a non-preemptible reclaimer
must stay within deserved quota at every level; its leaf queue within its limit, while an ancestor's
limit is checked in the scenario, with the victims under it gone: limits.py), or would take its leaf
queue over its fair share.
Victims: preemptible jobs of other queues with running pods that pass the leveled victim filter; jobs
protected by reclaim min-runtime offer only their pods above their minimum. The queue most over its
share gives first (re-evaluated after each chunk), level by level down to the leaf; inside a leaf the
lowest job goes first (lowest priority, above-min elastic, newest). The shared solver accumulates
chunks until the job is placed and `reclaimable.scenario_ok` holds. Victims get the message "Pod ns/p was preempted by workload
ns/<pg>." followed by the victim's and the reclaimer's queue lines at the divergence level.
"""

from __future__ import annotations

from collections.abc import Iterator

from shoal.core import capacity, limits, reclaimable, semipreemptible
from shoal.core.allocate import fair_request, limit_request
from shoal.core.context import Context
from shoal.core.evictors import run_evictors
from shoal.core.minruntime import (
    PREEMPTION_DELAY_NOT_ELAPSED,
    is_protected,
    preemption_delay_end,
    preemption_delay_message,
    reclaim_min_runtime,
)
from shoal.core.ordering import DEFAULT_POLICY, Policy
from shoal.core.queue_order import dominant_share
from shoal.core.resources import Resources
from shoal.core.session import Job, Task
from shoal.core.solver import (
    Budget,
    commit,
    solve,
)
from shoal.core.victims import Chunk, VictimPool, stream

NAME = "reclaim"


def record_delay(ctx: Context, job: Job) -> bool:
    """True (and the job's reason recorded) when the job is inside its preemption delay."""
    end = preemption_delay_end(ctx.session, job)
    if end is None:
        return False
    message = preemption_delay_message(job.group.preemption_delay_s or 0, end)
    outcome = ctx.outcome(job)
    if not outcome.reasons or outcome.reasons[-1].reason != PREEMPTION_DELAY_NOT_ELAPSED:
        outcome.refuse(PREEMPTION_DELAY_NOT_ELAPSED, message)
    return True


def leaf_streams(ctx: Context, job: Job, request: Resources, before: dict[str, Resources],
                 pool: VictimPool) -> dict[str, tuple[str, Iterator[Chunk]]]:
    """Lazy chunk streams per victim leaf queue, with the victim level queue each belongs to (the
    leveled filter is decided once per queue)."""
    session, shares = ctx.session, ctx.shares
    out: dict[str, tuple[str, Iterator[Chunk]]] = {}
    for name in pool.queues_with_victims():
        if name == job.queue:
            continue
        level = reclaimable.leveled(shares, job.queue, name)
        if level is None or not reclaimable.victim_allowed(shares, before, level, request):
            continue
        runtime = reclaim_min_runtime(session, job.queue, name)

        def protected(victim: Job, runtime=runtime) -> bool:
            return is_protected(session, victim, runtime)

        out[name] = (level[1], stream(pool.jobs([name]), protected))
    return out


def ordered_chunks(ctx: Context, streams: dict[str, tuple[str, Iterator[Chunk]]],
                   before: dict[str, Resources]) -> Iterator[Chunk]:
    """The most over-served queue gives next, level by level: among the victim level queues, then among
    that queue's children, down to a leaf (dominant share of what each still holds), so a department
    gives from the project most over its share first and no project is emptied while a sibling keeps
    more than its share. Inside a leaf the victim order holds."""
    shares = ctx.shares
    below: dict[str, list[str]] = {}  # queue -> its children with live leaves under them
    tops: set[str] = set()
    for leaf, (top, _) in streams.items():
        path = reclaimable.path_down(shares, leaf)
        path = path[path.index(top):]
        tops.add(top)
        for parent, child in zip(path, path[1:], strict=False):
            kids = below.setdefault(parent, [])
            if child not in kids:
                kids.append(child)
    left = {name: before[name] for name in set(below) | set(streams) | tops}
    live = {leaf: it for leaf, (_, it) in streams.items()}

    def alive(name: str) -> bool:
        return name in live or any(alive(c) for c in below.get(name, ()))

    score = {name: dominant_share(shares[name], ctx.total, held) for name, held in left.items()}

    def busiest(names) -> str:
        return max(sorted(names), key=score.__getitem__)

    while live:
        name = busiest([t for t in tops if alive(t)])
        path = [name]
        while name in below:  # down to a leaf, the busiest child each time
            name = busiest([c for c in below[name] if alive(c)])
            path.append(name)
        chunk = next(live[name], None)
        if chunk is None:
            del live[name]
            continue
        for queue in path:
            left[queue] = left[queue] - chunk.resources
            score[queue] = dominant_share(shares[queue], ctx.total, left[queue])
        yield chunk


def attempt(ctx: Context, job: Job, tasks: list[Task], budget: Budget, pool: VictimPool) -> bool:
    session, shares = ctx.session, ctx.shares
    before = reclaimable.allocations(session)
    request = fair_request(tasks)
    if not reclaimable.can_reclaim(shares, before, job.queue, request):
        return False
    streams = leaf_streams(ctx, job, request, before, pool)
    if not streams:
        return False
    mask = reclaimable.requested_mask(request)
    lines: dict[str, str] = {}

    def message_of(task: Task) -> str:
        vq = task.job.queue if task.job is not None else ""
        text = lines.get(vq)
        if text is None:
            r_name, v_name = reclaimable.leveled(shares, job.queue, vq) or (job.queue, vq)
            v_line = reclaimable.queue_line(shares[v_name], before[v_name], mask)
            r_line = reclaimable.queue_line(shares[r_name], before[r_name], mask)
            text = lines[vq] = f"{v_line}\n{r_line}"
        return f"Pod {task.key} was preempted by workload {job.key}.\n{text}"

    multiplier = max(float(session.config.reclaimer_saturation_multiplier), 1.0)

    def accept(chunks: list[Chunk]) -> bool:
        after = reclaimable.allocations(session)
        return (reclaimable.scenario_ok(shares, before, after, job.queue, request, chunks, multiplier)
                and limits.within_limits(ctx, job, tasks))

    got = solve(ctx, job, tasks, ordered_chunks(ctx, streams, before), accept, NAME, message_of, budget,
                excess=limits.Excess(ctx, job, tasks))
    if got is None:
        return False
    commit(ctx, job)
    return True


def run(ctx: Context, policy: Policy = DEFAULT_POLICY) -> None:

    budget = Budget(ctx, NAME)
    pool = ctx.action_victims()

    def admit(job: Job, tasks: list[Task]) -> bool:
        # OverLimit of an ancestor is checked inside the scenario (victims under it lower it); the
        # leaf's own limit cannot change, its victims are in other queues
        if semipreemptible.places_core(job) and capacity.check_non_preemptible_quota(ctx.shares, job.queue,
                                                                        limit_request(tasks)):
            return False
        return job.queue not in limits.Excess(ctx, job, tasks).over

    run_evictors(ctx, NAME, policy, budget, delayed=record_delay, admit=admit,
                 attempt=lambda job, tasks: attempt(ctx, job, tasks, budget, pool()))

"""The preempt action (KAI §4.5): inside one leaf queue, a higher-priority job evicts lower-priority ones.

Preemptors: pending, ready jobs outside their preemption delay; a non-preemptible one must first pass
NonPreemptibleOverQuota for the tasks it is about to place (capacity checks run before the search).
Victims: preemptible jobs of the SAME leaf queue with strictly lower priority and running pods, not
protected by preempt min-runtime (a protected elastic job offers only its pods above its minimum),
lowest priority first, then above-min elastic, then newest. The scenario must keep the queue and every
ancestor within its limit with the victims gone and the job placed; a queue at its limit can only make
room with victims on the node the job then takes (only needed victims, SPEC §4). Victims get "Pod ns/p was
preempted by higher priority workload ns/<pg>".
"""

from __future__ import annotations

from collections.abc import Iterator

from shoal.core import capacity, limits, semipreemptible
from shoal.core.allocate import limit_request
from shoal.core.context import Context
from shoal.core.evictors import run_evictors
from shoal.core.minruntime import is_protected, preempt_min_runtime
from shoal.core.ordering import DEFAULT_POLICY, Policy
from shoal.core.reclaim import record_delay
from shoal.core.session import Job, Task
from shoal.core.solver import (
    Budget,
    commit,
    solve,
)
from shoal.core.victims import Chunk, VictimPool, stream

NAME = "preempt"


def preempt_message(pod_key: str, preemptor_pg: str) -> str:
    return f"Pod {pod_key} was preempted by higher priority workload {preemptor_pg}"


def victim_chunks(ctx: Context, job: Job, pool: VictimPool) -> Iterator[Chunk]:
    """Lower-priority candidates of the job's own queue, lazily (the pool is in victim order)."""
    session = ctx.session

    def lower() -> Iterator[Job]:
        for victim in pool.jobs([job.queue]):
            if victim.priority >= job.priority:
                return  # victim order is by priority first
            if victim is not job:
                yield victim

    return stream(lower(), lambda v: is_protected(session, v, preempt_min_runtime(session, v)))


def attempt(ctx: Context, job: Job, tasks: list[Task], budget: Budget, pool: VictimPool) -> bool:
    head = pool.head(job.queue)
    if head is None or head[0] >= job.priority:  # no candidate of lower priority in the queue
        return False
    chunks = victim_chunks(ctx, job, pool)

    def accept(_: list[Chunk]) -> bool:
        return limits.within_limits(ctx, job, tasks)

    got = solve(ctx, job, tasks, chunks, accept, NAME, lambda t: preempt_message(t.key, job.key), budget,
                excess=limits.Excess(ctx, job, tasks))
    if got is None:
        return False
    commit(ctx, job)
    return True


def run(ctx: Context, policy: Policy = DEFAULT_POLICY) -> None:
    budget = Budget(ctx, NAME)
    pool = ctx.action_victims()

    def admit(job: Job, tasks: list[Task]) -> bool:  # OverLimit is checked inside the scenario, victims gone
        return not semipreemptible.places_core(job) or not capacity.check_non_preemptible_quota(ctx.shares, job.queue,
                                                                             limit_request(tasks))

    run_evictors(ctx, NAME, policy, budget, delayed=record_delay, admit=admit,
                 attempt=lambda job, tasks: attempt(ctx, job, tasks, budget, pool()))

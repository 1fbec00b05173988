"""The consolidation action (KAI §4.3): move running pods so that a pending job fits (defragmentation).

Preemptors: pending, ready, PREEMPTIBLE jobs outside their preemption delay that pass the queue
capacity checks, and only when the cluster's idle + releasing GPUs (whole GPUs plus free portions of
shared GPUs) cover the job's GPU request. Victims: preemptible jobs of any queue with running pods, at
most `ShardConfig.max_consolidation_preemptees` jobs (lowest priority, then newest first), moved in
chunks: pods above an elastic job's minimum one at a time, then the job's core at once (a gang is never
left below its minimum while its pods are recreated). A scenario is accepted only when the job is placed AND every moved pod is re-placed
(pipelined) elsewhere; nothing is stranded. The moved pods are evicted with "Pod ns/p was preempted and
rescheduled due to bin packing (resource consolidation) procedure"; their controllers recreate them and
the next cycles place them. Disabled under the spread placement strategy or with 0 preemptees (cycle.py).
"""

from __future__ import annotations

from collections.abc import Callable

from shoal.core import capacity, semipreemptible
from shoal.core.allocate import fair_request, limit_request
from shoal.core.context import Context
from shoal.core.evictors import run_evictors
from shoal.core.ordering import DEFAULT_POLICY, Policy
from shoal.core.reclaim import record_delay
from shoal.core.session import DEVICE_MILLI, Job, Task
from shoal.core.solver import (
    Budget,
    commit,
    solve,
)
from shoal.core.victims import Chunk, VictimPool, job_chunks

NAME = "consolidation"


def consolidation_message(pod_key: str) -> str:
    return f"Pod {pod_key} was preempted and rescheduled due to bin packing (resource consolidation) procedure"


def allocatable_gpu_milli(ctx: Context) -> int:
    """Idle + releasing GPUs of the cluster, whole devices plus free portions of shared GPUs (milli)."""
    total = 0
    for ns in ctx.session.nodes:
        if not ns.node.ready:
            continue
        total += max(ns.idle_gpus + ns.rel_gpus, 0) * DEVICE_MILLI
        for g in ns.groups.values():
            total += max(DEVICE_MILLI - g.used + g.releasing, 0)
    return total


def victim_chunks(ctx: Context, job: Job, pool: VictimPool) -> list[Chunk]:
    """Chunks of the first `max_consolidation_preemptees` candidate jobs of any queue, in victim order."""
    limit = max(ctx.session.config.max_consolidation_preemptees, 0)
    out: list[Chunk] = []
    taken = 0
    for victim in pool.jobs(pool.queues_with_victims()):
        if taken >= limit:
            break
        if victim is job:
            continue
        out.extend(job_chunks(victim))
        taken += 1
    return out


def attempt(ctx: Context, job: Job, tasks: list[Task], budget: Budget, pool: Callable[[], VictimPool],
            free: list[int]) -> bool:
    if free[0] != len(ctx.session.dirty):  # recount only after the nodes changed
        free[0], free[1] = len(ctx.session.dirty), allocatable_gpu_milli(ctx)
    if fair_request(tasks).gpu_milli > free[1]:
        return False
    chunks = victim_chunks(ctx, job, pool())
    if not chunks:
        return False
    got = solve(ctx, job, tasks, chunks, lambda _: True, NAME, lambda t: consolidation_message(t.key), budget,
                replace=True)
    if got is None:
        return False
    commit(ctx, job, hidden=frozenset(id(t) for c in got for t in c.tasks))
    return True


def run(ctx: Context, policy: Policy = DEFAULT_POLICY) -> None:
    cfg = ctx.session.config
    if cfg.max_consolidation_preemptees <= 0 or "spread" in (cfg.gpu_placement, cfg.cpu_placement):
        return
    budget = Budget(ctx, NAME)
    pool = ctx.action_victims()
    free = [-1, 0]  # [dirty-log length when counted, idle + releasing milli-GPUs]

    def admit(job: Job, tasks: list[Task]) -> bool:
        return capacity.check_capacity(ctx.shares, job.queue, limit_request(tasks),
                                       semipreemptible.places_core(job)) is None

    run_evictors(ctx, NAME, policy, budget, delayed=record_delay, admit=admit, only=lambda job: job.preemptible,
                 attempt=lambda job, tasks: attempt(ctx, job, tasks, budget, pool, free), grow=False)

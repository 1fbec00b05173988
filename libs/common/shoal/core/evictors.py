"""The loop the eviction actions share: pending jobs in queue order that may trigger evictions.

consolidation, reclaim and preempt differ only in which jobs may try (`only`), the capacity gate before a
scenario (`admit`) and the scenario itself (`attempt`); the loop around them is the same: skip jobs inside
their preemption delay (`delayed` records the reason), skip a job whose signature already failed or that is
past the queue depth, remember failures, grow a job that still has pending tasks again (`grow`), and say so
on the job when the victim-search budget runs out: the action's budget stops the action, a job's own
budget (`victim_budget_per_job`) stops only that job's search and the next jobs are still tried.
"""

from __future__ import annotations

from collections.abc import Callable

from shoal.core.allocate import fair_request
from shoal.core.context import Context
from shoal.core.ordering import JobQueue, Policy
from shoal.core.session import PENDING, Job, Task
from shoal.core.solver import (
    VICTIM_BUDGET_EXHAUSTED,
    Budget,
    budget_message,
    job_budget_message,
    job_signature,
    next_tasks,
    preemptor_candidates,
)


def run_evictors(ctx: Context, name: str, policy: Policy, budget: Budget, *,
                 delayed: Callable[[Context, Job], bool],
                 admit: Callable[[Job, list[Task]], bool],
                 attempt: Callable[[Job, list[Task]], bool],
                 only: Callable[[Job], bool] | None = None, grow: bool = True) -> None:
    jq = JobQueue(ctx.shares, ctx.total, lambda j: fair_request(next_tasks(j, policy)), policy)
    for candidate in preemptor_candidates(ctx):
        if only is None or only(candidate):
            jq.push(candidate)
    while not budget.exhausted:
        job = jq.pop()
        if job is None:
            break
        if delayed(ctx, job):
            continue
        tasks = next_tasks(job, policy)
        if not tasks or not admit(job, tasks):
            continue
        sig = job_signature(job, tasks)
        if sig in budget.failed or not budget.within_depth(job):
            continue
        budget.start_job()
        if attempt(job, tasks):
            budget.failed.clear()
            if grow and any(t.status == PENDING for t in job.tasks):
                jq.shares = ctx.shares
                jq.push(job)
        elif budget.exhausted:
            ctx.outcome(job).refuse(VICTIM_BUDGET_EXHAUSTED, budget_message(name, budget.spent))
        else:
            budget.failed.add(sig)
            if budget.job_exhausted:
                ctx.outcome(job).refuse(VICTIM_BUDGET_EXHAUSTED, job_budget_message(name, budget.job_spent))

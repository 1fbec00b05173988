"""Back-off after failed binds (KAI issue #2075: a pod whose bind the apiserver always rejects won the same
GPUs every cycle and starved the pods behind it).

The binder counts failed bind rounds on the PodGroup (`shoal.io/bind-failures`, at most one per plan),
with the time and error of the last (`shoal.io/last-bind-failure`, `shoal.io/last-bind-error`). After
failure n the job waits `min(max, initial · 2^(n-1))` (ShardConfig `bind_backoff_initial_s` 5 s,
`bind_backoff_max_s` 300 s) from the last failure: allocate and the eviction actions leave it out, so the
jobs behind it are planned first, and it gets the condition reason `BindBackoff` with the count, the error
and the time it is tried again. Once the job has no pending pod left (its pods bound), the three
annotations are cleared.
"""

from __future__ import annotations

from shoal.core.context import Context
from shoal.core.model import (
    ANNOTATION_BIND_FAILURES,
    ANNOTATION_LAST_BIND_ERROR,
    ANNOTATION_LAST_BIND_FAILURE,
    PodGroup,
    ShardConfig,
)
from shoal.core.plan import Annotate
from shoal.core.session import PENDING, Job, epoch_of
from shoal.core.timetext import go_duration, rfc3339

BIND_BACKOFF = "BindBackoff"


def backoff_s(failures: int, config: ShardConfig) -> int:
    if failures <= 0:
        return 0
    return min(config.bind_backoff_max_s, config.bind_backoff_initial_s * 2 ** min(failures - 1, 30))


def retry_at(group: PodGroup, config: ShardConfig) -> float | None:
    """When the job may be planned again, or None when it is not backing off."""
    if group.bind_failures <= 0 or not group.last_bind_failure:
        return None
    return epoch_of(group.last_bind_failure) + backoff_s(group.bind_failures, config)


def backing_off(job: Job, ctx: Context) -> bool:
    at = retry_at(job.group, ctx.session.config)
    return at is not None and ctx.session.now < at


def message(group: PodGroup, config: ShardConfig) -> str:
    at = retry_at(group, config) or 0.0
    error = group.last_bind_error or "unknown error"
    return (f"Binding failed {group.bind_failures} time(s), last: {error}; the job backs off "
            f"{go_duration(backoff_s(group.bind_failures, config))} (at most "
            f"{go_duration(config.bind_backoff_max_s)}) and is planned again after {rfc3339(at)}")


def hold(ctx: Context, job: Job) -> bool:
    """True (and the BindBackoff reason recorded) when the job is backing off."""
    if not backing_off(job, ctx):
        return False
    ctx.outcome(job).refuse(BIND_BACKOFF, message(job.group, ctx.session.config))
    return True


def clear_recovered(ctx: Context) -> None:
    """Clear the failure count of jobs that have no pending pod left after this cycle."""
    for job in ctx.session.jobs.made_jobs():
        if job.group.bind_failures and not any(t.status == PENDING for t in job.tasks):
            for key in (ANNOTATION_BIND_FAILURES, ANNOTATION_LAST_BIND_FAILURE, ANNOTATION_LAST_BIND_ERROR):
                ctx.status_ops.append(Annotate(pod_group=job.key, key=key, value=""))

"""The stalegangeviction action (KAI §4.7): evict what is left of a gang that fell below its minimum.

A job is stale when it has at least one active pod (allocated, pipelined, running or releasing), some
(sub)group has fewer active pods than its minMember (pods waiting on scheduling gates, as Grove gates the
pods it recreates, count toward it: that group is waiting, not broken), and none of its pods has Succeeded (a gang that is
completing is never evicted). The first time it is seen stale the PodGroup is annotated with
`kai.scheduler/stale-podgroup-timestamp` (now). Once the grace period has passed since that stamp, every
running pod is evicted ("Workload doesn't meet the minimum required number of pods (<min>), evicting
remaining pod: ns/p", or "... (<min>) in sub-group <sg>, ...") and the PodGroup gets the Normal event
StaleJob "Job is stale. <n> pods are active, minMember is <m>[, subGroup <s> minMember is <x> and <y>
pods are active]". Grace: PodGroup `staleness_grace_s`, else `ShardConfig.default_staleness_grace_s`
(60); negative = never evict. A job that recovers gets the stamp cleared (annotation set to "").
Non-preemptible jobs are not exempt.
"""

from __future__ import annotations

from shoal.core.context import Context
from shoal.core.model import ANNOTATION_STALE, PHASE_SUCCEEDED
from shoal.core.plan import Annotate, PodGroupEvent
from shoal.core.session import ACTIVE, GATED, RELEASING, RUNNING, Job, SubGroupNode, epoch_of
from shoal.core.timetext import rfc3339

NAME = "stalegangeviction"
STALE_JOB = "StaleJob"


def _active(node: SubGroupNode) -> int:
    if node.is_leaf:
        return sum(1 for t in node.tasks if t.status in ACTIVE or t.status == RELEASING)
    return sum(_active(c) for c in node.children)


def short_leaves(job: Job) -> list[tuple[SubGroupNode, int]]:
    """(leaf, active) for every leaf (sub)group below its minMember; the root when there are no subgroups.
    A leaf whose missing pods exist but wait on their scheduling gates is waiting, not short."""
    out = []
    stack = [job.root]
    while stack:
        node = stack.pop()
        if node.is_leaf:
            active = _active(node)
            gated = sum(1 for t in node.tasks if t.status == GATED)
            if active < (node.min_member or 0) and active + gated < (node.min_member or 0):
                out.append((node, active))
        else:
            stack.extend(node.children)
    return sorted(out, key=lambda pair: pair[0].name)


def eviction_message(pod_key: str, min_member: int, subgroup: str | None) -> str:
    where = f" in sub-group {subgroup}" if subgroup else ""
    return (
        f"Workload doesn't meet the minimum required number of pods ({min_member}){where}, "
        f"evicting remaining pod: {pod_key}"
    )


def stale_event(job: Job, short: list[tuple[SubGroupNode, int]]) -> str:
    text = f"Job is stale. {_active(job.root)} pods are active, minMember is {job.group.min_member}"
    for node, active in short:
        if node is not job.root:
            text += f", subGroup {node.name} minMember is {node.min_member or 0} and {active} pods are active"
    return text


def _succeeded_groups(ctx: Context) -> set[str]:
    return {
        f"{p.namespace}/{p.pod_group}" for p in ctx.session.snapshot.pods if p.pod_group and p.phase == PHASE_SUCCEEDED
    }


def _may_be_stale(job: Job) -> bool:
    """Cheap pre-filter: a plain gang without a stamp needs min > 1 and 0 < active < min."""
    if job.root.children or job.group.stale_timestamp:
        return True
    minimum = job.root.min_member or 0
    if minimum <= 1:
        return False  # one active pod already satisfies it; none active is not stale
    active = sum(1 for t in job.tasks if t.status in ACTIVE or t.status == RELEASING)
    return 0 < active < minimum


def run(ctx: Context) -> None:
    session = ctx.session
    completing: set[str] | None = None
    stamp_now = rfc3339(session.now)
    # jobs the session has not made run what they ran at the start: never stale (session.JobIndex)
    for job in sorted((j for j in session.jobs.made_jobs() if _may_be_stale(j)), key=lambda j: j.key):
        key = job.key
        group = job.group
        short = short_leaves(job)
        stale = bool(short) and _active(job.root) > 0
        if stale:
            if completing is None:
                completing = _succeeded_groups(ctx)
            stale = key not in completing
        if not stale:
            if group.stale_timestamp:
                ctx.status_ops.append(Annotate(pod_group=key, key=ANNOTATION_STALE, value=""))
            continue
        if not group.stale_timestamp:
            ctx.status_ops.append(Annotate(pod_group=key, key=ANNOTATION_STALE, value=stamp_now))
            continue
        grace = group.staleness_grace_s
        if grace is None:
            grace = session.config.default_staleness_grace_s
        if grace < 0 or session.now < epoch_of(group.stale_timestamp) + grace:
            continue
        running = sorted((t for t in job.tasks if t.status == RUNNING), key=lambda t: t.key)
        if not running:
            continue
        leaf, _ = short[0]
        subgroup = leaf.name if leaf is not job.root else None
        minimum = (leaf.min_member or 0) if subgroup else group.min_member
        for task in running:
            ctx.statement.evict(task, NAME, key, eviction_message(task.key, minimum, subgroup))
        ctx.accept(ctx.statement.commit())
        ctx.status_ops.append(PodGroupEvent(pod_group=key, reason=STALE_JOB, message=stale_event(job, short)))

"""The allocate action (KAI §4.2): place pending jobs onto idle (or releasing) resources, gang by gang.

For each job popped in queue/job order:
1. capacity checks (OverLimit, then NonPreemptibleOverQuota) on the leaf queue and every ancestor;
2. the tasks to place now: `minMember - active` tasks while the gang is not satisfied (recursively
   through subgroups and `minSubGroup`), else one more task (elastic growth, the job is pushed back);
3. every task goes to its best node (placement.py); if one fails, the job's statement is rolled back
   (all or nothing) and a PodSchedulingErrors reason is recorded;
4. if a task had to be pipelined while the gang was still below its minimum, the job's allocations of
   this cycle become pipelined;
5. commit.

Jobs that are not ready (fewer than minMember non-gated pods), in a missing queue, backing off after a
failed bind (bindbackoff.py), or carrying an invalid GPU-sharing annotation are reported and skipped; jobs in a non-leaf queue are skipped silently.
"""

from __future__ import annotations

from shoal.core import bindbackoff, capacity, reasons, semipreemptible, subgroup_topology, topology
from shoal.core.context import Context
from shoal.core.ordering import (
    DEFAULT_POLICY,
    JobQueue,
    Policy,
    active_in,
    is_satisfied,
    min_pods,
    subgroup_order,
)
from shoal.core.placement import find_node, fit_error, request_signature
from shoal.core.resources import Resources
from shoal.core.session import ACTIVE, GATED, PENDING, PIPELINED, Job, SubGroupNode, Task
from shoal.core.sharing_mode import request_error

NAME = "allocate"


def _pending_sorted(node: SubGroupNode, policy: Policy) -> list[Task]:
    """Pending tasks in task order; the order key is computed once per task (jobs are popped many times)."""
    pending = [t for t in node.tasks if t.status == PENDING]
    for t in pending:
        if not t.order:
            t.order = policy.task_key(t)
    pending.sort(key=_order_of)
    return pending


def _order_of(task: Task) -> tuple:
    return task.order


def tasks_to_allocate(node: SubGroupNode, policy: Policy) -> list[Task]:
    """KAI GetTasksToAllocate: the gang remainder while unsatisfied, else one more task."""
    if node.is_leaf:
        pending = _pending_sorted(node, policy)
        need = (node.min_member or 0) - active_in(node)
        return pending[:need] if need > 0 else pending[:1]
    children = subgroup_order(node.children)
    required = len(children) if node.min_subgroup is None else min(node.min_subgroup, len(children))
    satisfied = sum(1 for c in children if is_satisfied(c))
    if satisfied < required:
        out: list[Task] = []
        missing = required - satisfied
        for c in children:
            if missing == 0:
                break
            if is_satisfied(c):
                continue
            out.extend(tasks_to_allocate(c, policy))
            missing -= 1
        return out
    for c in children:
        got = tasks_to_allocate(c, policy)
        if got:
            return got
    return []


def _ready(node: SubGroupNode) -> bool:
    if node.is_leaf:
        return sum(1 for t in node.tasks if t.status != GATED) >= (node.min_member or 0)
    required = len(node.children) if node.min_subgroup is None else node.min_subgroup
    return sum(1 for c in node.children if _ready(c)) >= required


def _leaf_of(job: Job, task: Task) -> SubGroupNode:
    stack = [job.root]
    while stack:
        n = stack.pop()
        if n.is_leaf and task in n.tasks:
            return n
        stack.extend(n.children)
    return job.root


def limit_request(tasks: list[Task]) -> Resources:
    c = m = g = 0
    for t in tasks:
        c += t.cpu
        m += t.mem
        g += t.gpu_limit
    return Resources(c, m, g)


def fair_request(tasks: list[Task]) -> Resources:
    c = m = g = 0
    for t in tasks:
        c += t.cpu
        m += t.mem
        g += t.gpu_fair
    return Resources(c, m, g)


def _admit(ctx: Context, job: Job) -> bool:
    """Pre-checks before a job enters the queue; records NotReady / QueueDoesNotExist / invalid requests."""
    share = ctx.shares.get(job.queue)
    if share is None:
        v = capacity.queue_does_not_exist(job.queue)
        ctx.outcome(job).refuse(v.reason, v.message)
        return False
    if not share.is_leaf:
        return False
    pending = [t for t in job.tasks if t.status == PENDING]
    gated = [t for t in job.tasks if t.status == GATED]
    if not pending and not gated:
        return False
    if not _ready(job.root):  # waiting for pods or for their scheduling gates: an event, no condition
        gates = tuple(sorted({g for t in gated for g in t.pod.gates}))
        ctx.outcome(job).not_ready = reasons.not_ready(min_pods(job.root), len(job.tasks), len(gated), gates)
        return False
    if not pending:
        return False
    if bindbackoff.hold(ctx, job):
        return False
    mode = ctx.session.config.gpu_sharing_mode
    bad = [t for t in pending if request_error(t.pod, mode)]
    if bad:
        t = min(bad, key=lambda t: t.key)
        msg = reasons.invalid_gpu_request(t.key, request_error(t.pod, mode) or "")
        ctx.outcome(job).refuse(reasons.POD_SCHEDULING_ERRORS, msg)
        return False
    return True


def _leaves(node: SubGroupNode) -> list[SubGroupNode]:
    if node.is_leaf:
        return [node]
    return [leaf for c in node.children for leaf in _leaves(c)]


def _failure_message(job: Job, task: Task, placed: int, fit: str) -> tuple[str, bool]:
    """(message, is_per_pod) for a task that found no node after `placed` tasks of this attempt.

    The gang message is used when a (sub)group with min > 1 is still below its min: the failing task's
    own leaf first, else the first such leaf in name order; otherwise the per-pod message.
    """
    found = active_in(job.root) + placed
    if job.root.children:
        leaf = _leaf_of(job, task)
        below = [leaf] + [x for x in sorted(_leaves(job.root), key=lambda n: n.name) if x is not leaf]
        for sg in below:
            smin = sg.min_member or 0
            if smin > 1 and active_in(sg) < smin:
                return reasons.subgroup_gang_error(found, sg.name, smin, fit), False
    else:
        rmin = job.root.min_member or 0
        if rmin > 1 and found < rmin:
            return reasons.gang_error(found, rmin, fit), False
    return reasons.pod_error(task.key, fit), True


def allocate_job(ctx: Context, job: Job, tasks: list[Task]) -> bool:
    """Place `tasks` all or nothing; True when committed."""
    session, stmt = ctx.session, ctx.statement
    cp = stmt.checkpoint()
    was_satisfied = is_satisfied(job.root)
    placed = 0
    pipelined_below_min = False
    for task in tasks:
        sig = request_signature(task)
        fit = stmt.known_failure(sig)
        spot = None
        if fit is None:
            spot = find_node(session, ctx.nodes, task)
            if spot is None:
                fit = fit_error(session, ctx.nodes, task)
                stmt.remember_failure(sig, fit)
        if spot is None:
            # count what this attempt placed before rolling back (for the gang message)
            active_before_rollback = placed
            stmt.rollback(cp)
            message, per_pod = _failure_message(job, task, active_before_rollback, fit or "")
            out = ctx.outcome(job)
            out.refuse(reasons.POD_SCHEDULING_ERRORS, message)
            out.per_pod_fit = fit if per_pod else None
            return False
        if spot.pipelined:
            stmt.pipeline(task, spot.node, spot.picks)
            if not was_satisfied:
                pipelined_below_min = True
        else:
            stmt.allocate(task, spot.node, spot.picks)
        placed += 1
    if pipelined_below_min:
        stmt.convert_to_pipelined(stmt.pending_ops())
        for op in ctx.job_ops.get(job.key, ()):
            if op.kind == "allocate":
                op.kind = "pipeline"
                op.task.status = PIPELINED
                for gid, _index in op.new_groups:
                    op.node.groups[gid].pipelined = True
                session.dirty.append(op.node.index)
    ctx.accept(stmt.commit())
    return True


def _allocate_in_subgroups(ctx: Context, job: Job, tasks: list[Task]) -> bool:
    return subgroup_topology.allocate_within(ctx, job, tasks, allocate_job)


def run(ctx: Context, policy: Policy = DEFAULT_POLICY) -> None:
    session = ctx.session
    jq = JobQueue(ctx.shares, ctx.total, lambda j: fair_request(tasks_to_allocate(j.root, policy)), policy)
    for pending in session.pending_jobs:
        if _admit(ctx, pending):
            jq.push(pending)
    while True:
        if ctx.bind_cap and ctx.binds >= ctx.bind_cap:  # a job is placed whole even past the cap
            ctx.capped = jq.pop() is not None
            break
        job = jq.pop()
        if job is None:
            break
        tasks = tasks_to_allocate(job.root, policy)
        if not tasks:
            continue
        verdict = capacity.check_capacity(ctx.shares, job.queue, limit_request(tasks),
                                          semipreemptible.places_core(job))
        if verdict is not None:
            ctx.outcome(job).refuse(verdict.reason, verdict.message, verdict.details)
            continue
        if topology.constraint_of(job):  # core II: topology-aware placement tries one domain at a time
            placed = topology.allocate_in_domains(ctx, job, tasks, _allocate_in_subgroups)
        else:
            placed = _allocate_in_subgroups(ctx, job, tasks)
        if placed and any(t.status == PENDING for t in job.tasks):
            jq.shares = ctx.shares
            jq.push(job)


def has_active(job: Job) -> bool:
    return any(t.status in ACTIVE for t in job.tasks)

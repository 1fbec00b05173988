"""Semi-preemptible workloads (KAI v0.18, `preemptibility: semi-preemptible`): a protected core and surplus.

The core is the job's minimal satisfying set of active (allocated, pipelined or running) tasks, taken at
every level of its gang tree:
- a leaf keeps its first `minMember` active tasks in task order (`ordering.task_order_key`);
- a (sub)group with children keeps `minSubGroup` of them (all when unset): satisfied children first, then
  by name, so the core does not move as pods come and go; inside each kept child the same rule applies.

The core counts as non-preemptible: its resources are in the queue's allocated non-preemptible figures, it
must fit within deserved quota when placed (NonPreemptibleOverQuota, reclaim's non-preemptible check),
and no eviction action ever takes it (`victims.job_chunks`). Every other active task is surplus: over
quota if need be, preemptible, reclaimed and preempted like any elastic extra. The core pods' names are
published as `status.schedulingState.corePods`.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from shoal.core.fairshare import QueueShare
from shoal.core.ordering import is_satisfied, task_order_key
from shoal.core.queue_order import record_non_preemptible
from shoal.core.resources import Resources
from shoal.core.session import ACTIVE, Job, Session, SubGroupNode, Task


def core_tasks(job: Job) -> list[Task]:
    """The job's core (see the module docstring); empty for a job that is not semi-preemptible."""
    out: list[Task] = []
    if job.semi:
        _collect(job.root, out)
    return out


def _split(node: SubGroupNode) -> tuple[list[SubGroupNode], list[SubGroupNode]]:
    """(core children, other children) of a (sub)group with children, each in core order."""
    children = sorted(node.children, key=lambda c: (not is_satisfied(c), c.name))
    keep = len(children) if node.min_subgroup is None else min(node.min_subgroup, len(children))
    return children[:keep], children[keep:]


def _collect(node: SubGroupNode, out: list[Task]) -> None:
    if node.is_leaf:
        active = sorted((t for t in node.tasks if t.status in ACTIVE), key=task_order_key)
        out.extend(active[: node.min_member or 0])
        return
    for child in _split(node)[0]:
        _collect(child, out)


def _subtree_tasks(node: SubGroupNode) -> list[Task]:
    if node.is_leaf:
        return list(node.tasks)
    return [t for c in node.children for t in _subtree_tasks(c)]


def surplus_subgroups(job: Job) -> list[list[Task]]:
    """The tasks of each subgroup outside the core (at any level), in eviction order: at each level the
    last in core order first (unsatisfied before satisfied, then by name descending), outer levels first."""
    out: list[list[Task]] = []
    pending = [job.root]
    while pending:
        node = pending.pop(0)
        if node.is_leaf:
            continue
        core, rest = _split(node)
        out.extend(_subtree_tasks(c) for c in reversed(rest))
        pending.extend(core)
    return out


def core_pod_names(job: Job) -> tuple[str, ...]:
    return tuple(sorted(t.pod.name for t in core_tasks(job)))


def _vector(tasks: list[Task]) -> tuple[int, int, int]:
    c = m = g = 0
    for t in tasks:
        c += t.cpu
        m += t.mem
        g += t.gpu_fair
    return (c, m, g)


def places_core(job: Job) -> bool:
    """Whether the tasks the job places next count as non-preemptible: always for a non-preemptible job,
    while its gang minimum is not met for a semi-preemptible one (those tasks become its core)."""
    if not job.preemptible:
        return True
    return job.semi and not is_satisfied(job.root)


def count_cores(session: Session) -> None:
    """Add each semi-preemptible job's core to its queue's own non-preemptible figures (build time, once)."""
    if session.cores_counted:
        return
    session.cores_counted = True
    for gi in session.semi_positions:
        job = session.jobs.job_at(gi)
        own = session.own.get(job.queue)
        job.core_np = _vector(core_tasks(job))
        if own is not None:
            np = own[2]
            for i, v in enumerate(job.core_np):
                np[i] += v


def record_core(shares: MutableMapping[str, QueueShare], job: Job) -> None:
    """Keep the queue's non-preemptible figures at the job's current core after committed changes."""
    now = _vector(core_tasks(job))
    before = job.core_np
    if now == before:
        return
    job.core_np = now
    if job.queue in shares:
        record_non_preemptible(shares, job.queue, Resources(*(a - b for a, b in zip(now, before, strict=True))))

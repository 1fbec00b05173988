"""Queue, job, task and subgroup order (KAI §4.1), as plain key functions composed in a `Policy` value.

- Queue order: the eight rules of `queue_order.compare_queues` (fairshare helper), applied at each level
  of the queue tree between the children that still hold a pending job, each with its next job's request.
- Job order inside a leaf queue: higher priority first; then below-min elastic jobs, then at-min, then
  above-min; then older PodGroup creation; then uid (then name, so the order is total).
- Task order inside a job: kubeflow master/launcher and ray head first; then `kai.scheduler/task-priority`
  (higher first, labelled before unlabelled); then pod creation; then uid.
- Subgroup order: subgroups still below their threshold first, then by name.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import NamedTuple

from shoal.core.fairshare import QueueShare
from shoal.core.model import LABEL_KUBEFLOW_ROLE, LABEL_RAY_NODE_TYPE
from shoal.core.queue_order import LEFT_FIRST, compare_queues
from shoal.core.resources import Resources
from shoal.core.session import Job, SubGroupNode, Task, epoch_of


def task_order_key(task: Task) -> tuple:
    pod = task.pod
    labels = pod.labels
    role = labels.get(LABEL_KUBEFLOW_ROLE)
    lead = role in ("master", "launcher") or labels.get(LABEL_RAY_NODE_TYPE) == "head"
    prio = pod.task_priority
    return (
        0 if lead else 1,
        0 if prio is not None else 1,
        -(prio or 0),
        epoch_of(pod.created),
        pod.uid,
        pod.name,
    )


def min_pods(node: SubGroupNode) -> int:
    """Pods needed for this (sub)group to be satisfied."""
    if node.is_leaf:
        return node.min_member or 0
    need = sorted(min_pods(c) for c in node.children)
    k = len(need) if node.min_subgroup is None else min(node.min_subgroup, len(need))
    return sum(need[:k])


def active_in(node: SubGroupNode) -> int:
    if node.is_leaf:
        return node.active
    return sum(active_in(c) for c in node.children)


def is_satisfied(node: SubGroupNode) -> bool:
    if node.is_leaf:
        return active_in(node) >= (node.min_member or 0)
    required = len(node.children) if node.min_subgroup is None else node.min_subgroup
    return sum(1 for c in node.children if is_satisfied(c)) >= required


def subgroup_order(children: list[SubGroupNode]) -> list[SubGroupNode]:
    return sorted(children, key=lambda c: (is_satisfied(c), c.name))


def elastic_state(job: Job) -> int:
    """0: below its minimum, 1: exactly at it, 2: above it."""
    if not is_satisfied(job.root):
        return 0
    return 1 if active_in(job.root) <= min_pods(job.root) else 2


def job_order_key(job: Job) -> tuple:
    g = job.group
    return (-job.priority, elastic_state(job), job.created, g.uid, g.name, g.namespace)


class Policy(NamedTuple):
    job_key: Callable[[Job], tuple] = job_order_key
    task_key: Callable[[Task], tuple] = task_order_key
    queue_compare: Callable[..., int] = compare_queues


DEFAULT_POLICY = Policy()


class JobQueue:
    """Pending jobs by leaf queue; `pop()` walks the queue tree picking the preferred child each level."""

    def __init__(
        self,
        shares: dict[str, QueueShare],
        total: Resources,
        request_of: Callable[[Job], Resources],
        policy: Policy | None = None,
    ) -> None:
        self.shares = shares
        self.total = total
        self.request_of = request_of
        self.policy = policy if policy is not None else DEFAULT_POLICY
        self.heaps: dict[str, list[tuple[tuple, int, Job]]] = {}
        self._seq = 0
        self._req: dict[str, Resources] = {}
        self._memo: dict[str, tuple[tuple, QueueShare, tuple[str, Job] | None]] = {}

    def push(self, job: Job) -> None:
        self._seq += 1
        self._req.pop(job.key, None)
        heapq.heappush(self.heaps.setdefault(job.queue, []), (self.policy.job_key(job), self._seq, job))

    def _request(self, job: Job) -> Resources:
        r = self._req.get(job.key)
        if r is None:
            r = self.request_of(job)
            self._req[job.key] = r
        return r

    def _best(self, name: str) -> tuple[str, Job] | None:
        """The job this (sub)tree offers next. An inner queue's choice is kept while its children's
        shares and offers are the same objects (only the path of a popped or allocated job changes)."""
        share = self.shares.get(name)
        if share is None:
            return None
        if share.is_leaf:
            heap = self.heaps.get(name)
            return (name, heap[0][2]) if heap else None
        offers = []
        for child in share.children:
            got = self._best(child)
            if got is not None:
                offers.append((child, got))
        stamp = tuple((id(self.shares[c]), id(got[1]), id(self._request(got[1]))) for c, got in offers)
        memo = self._memo.get(name)
        if memo is not None and memo[0] == stamp and memo[1] is share:
            return memo[2]
        best: tuple[str, Job, QueueShare] | None = None
        for child, got in offers:
            cshare = self.shares[child]
            if best is None:
                best = (got[0], got[1], cshare)
                continue
            order = self.policy.queue_compare(
                cshare, best[2], self._request(got[1]), self._request(best[1]), self.total
            )
            if order == LEFT_FIRST:
                best = (got[0], got[1], cshare)
        result = (best[0], best[1]) if best is not None else None
        self._memo[name] = (stamp, share, result)
        return result

    def pop(self) -> Job | None:
        best: tuple[str, Job, QueueShare] | None = None
        for name, share in self.shares.items():
            if share.parent is not None:
                continue
            got = self._best(name)
            if got is None:
                continue
            if best is None or (
                self.policy.queue_compare(
                    share, best[2], self._request(got[1]), self._request(best[1]), self.total
                )
                == LEFT_FIRST
            ):
                best = (got[0], got[1], share)
        if best is None:
            return None
        heapq.heappop(self.heaps[best[0]])
        return best[1]

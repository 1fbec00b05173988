"""Victim candidates and their order (KAI §4.1 "victim queues", §4.4 chunks, §4.8 preemptibility).

A victim job is split into chunks, the unit the solver evicts in one step:
- the pods an elastic job runs above its minimum, one pod per chunk, newest pod first, never taking a
  (sub)group below its own minimum;
- then the job's core: all its remaining running pods at once (a gang is never left below its minimum).
A job protected by min-runtime offers only its elastic chunks.

Only jobs whose active pods are all running (nothing allocated or pipelined in this cycle) are victims,
so a simulated eviction can never split a gang between "running" and "just placed".

Order inside a victim queue: lowest priority first, then jobs above their minimum, then the newest
PodGroup, then uid descending.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator

from shoal.core.model import PodGroup
from shoal.core.ordering import elastic_state, task_order_key
from shoal.core.resources import Resources
from shoal.core.semipreemptible import surplus_subgroups
from shoal.core.session import (
    ALLOCATED,
    PIPELINED,
    RUNNING,
    Job,
    NodeState,
    Session,
    SubGroupNode,
    Task,
    epoch_of,
)


class Chunk:
    __slots__ = ("job", "tasks", "resources", "core", "homes", "nodes")

    def __init__(self, job: Job, tasks: list[Task], core: bool, homes: list[NodeState] | None = None) -> None:
        self.job = job
        self.tasks = tasks
        self.core = core
        # where each pod runs (a simulated consolidation moves the task, not its home)
        self.homes: tuple[NodeState, ...] = tuple(homes if homes is not None else (t.node for t in tasks))
        self.nodes = tuple({id(ns): ns for ns in self.homes if ns is not None}.values())
        c = m = g = 0
        for t in tasks:
            c += t.cpu
            m += t.mem
            g += t.gpu_fair
        self.resources = Resources(c, m, g)

    def __repr__(self) -> str:
        return f"Chunk({self.job.key}, {[t.key for t in self.tasks]}, core={self.core})"


def is_victim_candidate(job: Job) -> bool:
    """Preemptible, has running pods, and nothing of it is being placed in this cycle."""
    if not job.preemptible:
        return False
    running = False
    for t in job.tasks:
        if t.status == RUNNING:
            if t.pod.eviction_blocked:  # a PDB allows no disruption now: the Eviction API would refuse
                return False
            running = True
        elif t.status == ALLOCATED or t.status == PIPELINED:
            return False
    return running


def _leaves(node: SubGroupNode) -> list[SubGroupNode]:
    if node.is_leaf:
        return [node]
    out: list[SubGroupNode] = []
    for c in node.children:
        out.extend(_leaves(c))
    return out


def _newest_first(tasks: list[Task]) -> list[Task]:
    return sorted(tasks, key=task_order_key, reverse=True)


def job_chunks(job: Job, protected: bool = False) -> list[Chunk]:
    """The job's chunks in eviction order (see the module docstring); a semi-preemptible job offers only
    its surplus: its pods above each leaf's minimum, then (not protected by min-runtime) each subgroup
    outside its core as a whole; its core is never a victim."""
    running = [t for t in job.tasks if t.status == RUNNING]
    if not running:
        return []
    root = job.root
    extras: list[Task] = []
    if root.children:
        for leaf in _leaves(root):
            mine = _newest_first([t for t in leaf.tasks if t.status == RUNNING])
            spare = len(mine) - (leaf.min_member or 0)
            if spare > 0:
                extras.extend(mine[:spare])
        extras = _newest_first(extras)
    else:
        spare = len(running) - (root.min_member or 0)
        if spare > 0:
            extras = _newest_first(running)[:spare]
    chunks = [Chunk(job, [t], core=False) for t in extras]
    if job.semi and not protected:  # then whole subgroups outside the core; the core itself never
        taken = {id(t) for t in extras}
        for tasks in surplus_subgroups(job):
            rest = _newest_first([t for t in tasks if t.status == RUNNING and id(t) not in taken])
            if rest:
                chunks.append(Chunk(job, rest, core=False))
        return chunks
    if job.semi:
        return chunks
    if not protected:
        taken = {id(t) for t in extras}
        core = _newest_first([t for t in running if id(t) not in taken])
        if core:
            chunks.append(Chunk(job, core, core=True))
    return chunks


Entry = tuple[int, int, float, int]  # (priority, -elastic state, -created, the job's PodGroup position)


def _desc(text: str) -> tuple[int, ...]:
    """A key whose ascending order is `text`'s descending order (a longer text before its prefix)."""
    return (*(-ord(ch) for ch in text), 1)


class _QueueOrder:
    """One queue's candidates: a heap of entries, moved lazily into `out` in victim order.

    Only the front of a queue is ever read (the solver stops at the first scenario that works), so the
    queue is heapified once (linear) and ordered only as far as it is read. Entries that tie on the
    heap key are ordered by PodGroup uid, then name, both descending, then position.
    """

    __slots__ = ("heap", "out", "start", "current")

    def __init__(self) -> None:
        self.heap: list[Entry] = []
        self.out: list[Entry] = []
        self.start = 0  # entries before it are no longer candidates
        self.current: dict[int, Entry] = {}  # re-keyed jobs: their entry now (older ones are stale)

    def at(self, i: int, groups: tuple[PodGroup, ...]) -> Entry | None:
        out = self.out
        while len(out) <= i:
            if not self._extend(groups):
                return None
        return out[i]

    def _live(self, e: Entry) -> bool:
        return not self.current or self.current.get(e[3], e) == e

    def _extend(self, groups: tuple[PodGroup, ...]) -> bool:
        heap = self.heap
        while heap:
            e = heapq.heappop(heap)
            if not self._live(e):
                continue
            batch = [e]
            head = e[:3]
            while heap and heap[0][:3] == head:
                f = heapq.heappop(heap)
                if self._live(f):
                    batch.append(f)
            if len(batch) > 1:  # stable: equal uid and name keep position order
                batch.sort(key=lambda x: (groups[x[3]].uid, groups[x[3]].name), reverse=True)
            self.out.extend(batch)
            return True
        return False

    def rekey(self, entry: Entry) -> None:
        self.current[entry[3]] = entry
        for e in self.out[self.start :]:  # order what was already ordered again, with the new entry
            heapq.heappush(self.heap, e)
        self.out = []
        self.start = 0
        heapq.heappush(self.heap, entry)


Rank = tuple[str, int, int, float]


def _start_state(running: int, min_member: int) -> int:
    """elastic_state of a job without subgroups that runs `running` pods and nothing else."""
    if running < min_member:
        return 0
    return 1 if running <= min_member else 2


def build_rank(group: PodGroup, running: int, priority_of: Callable[[PodGroup], tuple[int, bool]]) -> Rank:
    """(queue, then the victim order's key) of a PodGroup no job was made for, which runs `running`
    preemptible pods: what `VictimPool` ranks it by (the kept pass keeps it between cycles)."""
    mm = group.min_member
    c = group.created
    created = float(c) if type(c) is int else epoch_of(c)
    return group.queue, priority_of(group)[0], -_start_state(running, mm if mm > 0 else 0), -created


class VictimPool:
    """The cycle's victim candidates per leaf queue, in victim order, shared by the eviction actions.

    Built once, when the first eviction action asks (`Context.victim_pool`): jobs the session has not
    made yet are ranked from the build's counts (they run what they ran at the start) and made only
    when a consumer reaches them. Candidates only drop out after the build (a committed placement or
    eviction never makes a job a candidate), so jobs are re-checked when consumed; a job whose
    above-minimum state changed through committed evictions is re-ranked by `refresh()`, which the
    next action calls before it starts (inside an action the ranks stay fixed).
    """

    def __init__(self, session: Session, queues: set[str] | dict) -> None:
        self.index = session.jobs
        self.groups = groups = session.jobs.groups
        self.queues = queues
        self.by_queue: dict[str, _QueueOrder] = {}
        self.keys: dict[int, Entry] = {}  # ranked from a made job (else from the build's counts)
        made = self.index.made
        priority_of = session.priority_of
        by_queue = self.by_queue
        ranks = session.victim_ranks
        for gi, running in session.running_preemptible.items():
            if gi in made:
                continue
            rank = ranks.get(gi)
            if rank is None:
                rank = build_rank(groups[gi], running, priority_of)
            q = rank[0]
            if q not in queues:
                continue
            order = by_queue.get(q)
            if order is None:
                order = by_queue[q] = _QueueOrder()
            order.heap.append((rank[1], rank[2], rank[3], gi))
        for gi, job in made.items():
            if job.queue in queues and is_victim_candidate(job):
                e = self.keys[gi] = (job.priority, -elastic_state(job), -job.created, gi)
                order = by_queue.get(job.queue)
                if order is None:
                    order = by_queue[job.queue] = _QueueOrder()
                order.heap.append(e)
        for order in by_queue.values():
            heapq.heapify(order.heap)

    def refresh(self) -> None:
        """Re-rank the candidates whose elastic state changed since they were ranked."""
        for gi, job in self.index.made.items():
            if job.queue not in self.queues or not is_victim_candidate(job):
                continue
            before = self.keys.get(gi)
            if before is None:  # ranked from the build's counts: made later, untouched until now
                before = (job.priority, -_start_state(job.allocated_at_start, job.root.min_member or 0),
                          -job.created, gi)
            now = (job.priority, -elastic_state(job), -job.created, gi)
            if now != before:
                self.keys[gi] = now
                order = self.by_queue.get(job.queue)
                if order is None:
                    order = self.by_queue[job.queue] = _QueueOrder()
                order.rekey(now)

    def queues_with_victims(self) -> list[str]:
        """Queues that still hold a candidate, by name."""
        return [q for q in sorted(self.by_queue) if self.head(q) is not None]

    def head(self, queue: str) -> Entry | None:
        """The queue's first candidate entry (its priority is the lowest), or None."""
        order = self.by_queue.get(queue)
        if order is None:
            return None
        self._drop_front(order)
        return order.at(order.start, self.groups)

    def _drop_front(self, order: _QueueOrder) -> None:
        """Jobs taken earlier in the cycle stay out of it: drop them from the front."""
        made = self.index.made
        while True:
            e = order.at(order.start, self.groups)
            if e is None:
                return
            job = made.get(e[3])
            if job is None or is_victim_candidate(job):
                return
            order.start += 1

    def jobs(self, queues: list[str]) -> Iterator[Job]:
        """Candidate jobs of `queues` merged in victim order, still candidates now."""
        groups, job_at = self.groups, self.index.job_at
        orders = []
        for q in sorted(queues):
            order = self.by_queue.get(q)
            if order is not None:
                self._drop_front(order)
                orders.append(order)
        if len(orders) == 1:
            order = orders[0]
            i = order.start
            while (e := order.at(i, groups)) is not None:
                i += 1
                job = job_at(e[3])
                if is_victim_candidate(job):
                    yield job
            return
        heads = []
        for n, order in enumerate(orders):
            e = order.at(order.start, groups)
            if e is not None:
                heads.append((self._full(e), n, order.start))
        heapq.heapify(heads)
        while heads:
            _, n, i = heads[0]
            order = orders[n]
            e = order.out[i]
            following = order.at(i + 1, groups)
            if following is None:
                heapq.heappop(heads)
            else:
                heapq.heapreplace(heads, (self._full(following), n, i + 1))
            job = job_at(e[3])
            if is_victim_candidate(job):
                yield job

    def _full(self, e: Entry) -> tuple:
        g = self.groups[e[3]]
        return (e[0], e[1], e[2], _desc(g.uid), _desc(g.name), e[3])


def stream(jobs: Iterable[Job], protected: Callable[[Job], bool]) -> Iterator[Chunk]:
    for job in jobs:
        yield from job_chunks(job, protected(job))

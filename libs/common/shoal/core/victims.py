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

from shoal.core.ordering import elastic_state, task_order_key
from shoal.core.resources import Resources
from shoal.core.session import ALLOCATED, PIPELINED, RUNNING, Job, SubGroupNode, Task


class Chunk:
    __slots__ = ("job", "tasks", "resources", "core")

    def __init__(self, job: Job, tasks: list[Task], core: bool) -> None:
        self.job = job
        self.tasks = tasks
        self.core = core
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
    """The job's chunks in eviction order (see the module docstring)."""
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
    if not protected:
        taken = {id(t) for t in extras}
        core = _newest_first([t for t in running if id(t) not in taken])
        if core:
            chunks.append(Chunk(job, core, core=True))
    return chunks


class VictimPool:
    """Victim candidates of one action run, per leaf queue, each list in victim order (built once).

    Jobs are re-checked when consumed (`stream`), so one evicted or re-placed earlier in the action is
    skipped; chunks are built lazily, only for the jobs the solver actually reaches.
    """

    def __init__(self, jobs: dict[str, Job], queues: set[str] | dict) -> None:
        self.by_queue: dict[str, list[tuple[int, Job]]] = {}
        found = [job for job in jobs.values() if job.queue in queues and is_victim_candidate(job)]
        # victim order without building reversed strings: ties (uid, name) descending, then a stable
        # sort on the primary key (priority, above-min first, newest first)
        found.sort(key=lambda j: (j.group.uid, j.group.name), reverse=True)
        found.sort(key=lambda j: (j.priority, -elastic_state(j), -j.created))
        for rank, job in enumerate(found):
            self.by_queue.setdefault(job.queue, []).append((rank, job))

    def jobs(self, queues: list[str]) -> Iterator[Job]:
        """Candidate jobs of `queues` merged in victim order, still candidates now."""
        lists = []
        for q in sorted(queues):
            entries = self.by_queue.get(q)
            if not entries:
                continue
            gone = 0  # jobs already taken in this action stay out of it: drop them from the front
            while gone < len(entries) and not is_victim_candidate(entries[gone][1]):
                gone += 1
            if gone:
                del entries[:gone]
            lists.append(entries)
        for _, job in heapq.merge(*lists, key=lambda e: e[0]):
            if is_victim_candidate(job):
                yield job


def stream(jobs: Iterable[Job], protected: Callable[[Job], bool]) -> Iterator[Chunk]:
    for job in jobs:
        yield from job_chunks(job, protected(job))

"""Cheap necessary conditions the victim solver checks before it simulates a chunk (SPEC §4 "only
needed victims", issue: reclaim that finishes at 1,000+ nodes).

A victim is only ever kept when the preemptor lands on its node (or it is a gang-mate of one that is),
so a chunk is worth simulating only when, on one of its nodes, it frees something a preemptor task is
short of there: whole GPUs or a shared GPU's portion for a GPU task, CPU, memory, or a pod slot. A task
that already fits a node needs no victim on it. A chunk that lowers a queue that is over its limit is
kept too (`frees`, limits.py: the victim's node then takes the job).

`shapes` gives one representative task per request signature, how many of the job's tasks ask for it,
and its statically feasible node indices (`Feasible`: once per static signature and action), so the
per-chunk checks do no signature work.
"""

from __future__ import annotations

from collections.abc import Callable

from shoal.core.gpusharing import fraction_fit
from shoal.core.placement import NodeFilter, request_signature, static_signature
from shoal.core.session import RUNNING, NodeState, Task
from shoal.core.victims import Chunk

Frees = Callable[[Chunk], bool]


class Feasible:
    """Per cycle: static signature -> indices of the nodes that pass the static predicates."""

    def __init__(self, nodes: NodeFilter) -> None:
        self.nodes = nodes
        self._sets: dict[tuple, frozenset[int]] = {}

    def of(self, task: Task) -> frozenset[int]:
        sig = static_signature(task)
        got = self._sets.get(sig)
        if got is None:
            cands, _ = self.nodes.candidates(task)
            got = self._sets[sig] = frozenset(ns.index for ns in cands)
        return got


Shape = tuple[Task, int, frozenset[int]]  # a task, how many ask for the same, the nodes it may use


def shapes(tasks: list[Task], feasible: Feasible) -> list[Shape]:
    """One task per distinct request with how many of the tasks ask for it (a gang's are mostly alike)."""
    seen: dict[tuple, list] = {}
    for t in tasks:
        entry = seen.setdefault(request_signature(t), [t, 0])
        entry[1] += 1
    return [(t, n, feasible.of(t)) for t, n in seen.values()]


def _fraction_fits(ns: NodeState, task: Task) -> bool:
    share = task.device_milli(ns)
    return share is not None and fraction_fit(ns, share, task.devices, False, task.compute_mode) is not None


def short_of(ns: NodeState, task: Task, count: int = 1) -> tuple[bool, bool, bool, bool] | None:
    """What `count` tasks like `task` lack on `ns` now, as (gpu, cpu, memory, pod slot); None when they
    fit as it is. (Counting all of a gang's alike tasks keeps a node that could hold more of them.)"""
    gpu = task.gpus * count > ns.idle_gpus + ns.rel_gpus
    cpu = task.cpu * count > ns.idle_cpu + ns.rel_cpu
    mem = task.mem * count > ns.idle_mem + ns.rel_mem
    slots = (1 + (task.devices if task.is_fraction else 0)) * count
    pods = ns.idle_pods + ns.rel_pods < slots
    if task.is_fraction and not gpu and not _fraction_fits(ns, task):
        gpu = True
    if gpu or cpu or mem or pods:
        return gpu, cpu, mem, pods
    return None


def _frees(victim: Task, lack: tuple[bool, bool, bool, bool]) -> bool:
    gpu, cpu, mem, pods = lack
    return (
        pods
        or (gpu and (victim.gpus > 0 or bool(victim.groups)))
        or (cpu and victim.cpu > 0)
        or (mem and victim.mem > 0)
    )


def helps(chunk: Chunk, preemptor: list[Shape], frees: Frees | None = None) -> bool:
    """True when evicting `chunk` can matter to a placement of `preemptor` (see the module docstring)."""
    if frees is not None and frees(chunk):
        return True
    for victim in chunk.tasks:
        ns = victim.node
        if ns is None or victim.status != RUNNING:
            continue
        for task, count, allowed in preemptor:
            if ns.index not in allowed:
                continue
            lack = short_of(ns, task, count)
            if lack is not None and _frees(victim, lack):
                return True
    return False


def hosts(chunk: Chunk, preemptor: list[Shape]) -> bool:
    """After evicting `chunk`: one of its nodes can take a preemptor task. The job did not fit before
    its victims, so a placement is worth trying again only then (placement is deterministic)."""
    for ns in chunk.nodes:
        for task, _, allowed in preemptor:
            if ns.index in allowed and short_of(ns, task) is None:
                return True
    return False

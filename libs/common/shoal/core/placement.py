"""Node predicates and node scores (KAI §4.2) and the best-node search for one task.

Static predicates (Ready, cordon, nodeSelector, required node affinity, taints, MIG for fractions, GPU
memory synced for gpu-memory requests) depend only on the pod's constraints: they are evaluated once
per constraint signature and cycle. Dynamic predicates (GPUs, CPU, memory, pod slots, shared-GPU
portion) run against the current simulated state.

Scores are summed: nominatednode 1e7, gpusharingorder 1e4, nodeavailability 1000, resourcetype 10,
nodeplacement 0..9. nodeplacement is an affine function of the node's free resource (binpack: fewer free
scores higher; spread: free/total), so instead of normalising over all fitting nodes the search
compares (summed score, placement rank, name) directly, which gives the same order. Ties by node name.
"""

from __future__ import annotations

import heapq

from shoal.core import reasons
from shoal.core.gpusharing import fraction_fit, pick_groups
from shoal.core.model import Node, NodeSelectorRequirement, Pod
from shoal.core.session import DEVICE_MILLI, NodeState, Session, Task
from shoal.core.sharing_mode import SM_SHARING, TIME_SLICING
from shoal.core.statement import GroupPick

SCORE_NOMINATED = 10_000_000
SCORE_SHARING = 10_000
SCORE_AVAILABLE = 1_000
SCORE_RESOURCE_TYPE = 10


class Placement:
    __slots__ = ("node", "picks", "pipelined")

    def __init__(self, node: NodeState, picks: list[GroupPick], pipelined: bool) -> None:
        self.node = node
        self.picks = picks
        self.pipelined = pipelined


def _requirement_holds(req: NodeSelectorRequirement, labels: dict[str, str]) -> bool:
    op = req.operator
    val = labels.get(req.key)
    if op == "In":
        return val is not None and val in req.values
    if op == "NotIn":
        return val is None or val not in req.values
    if op == "Exists":
        return val is not None
    if op == "DoesNotExist":
        return val is None
    if op in ("Gt", "Lt"):
        if val is None or not req.values:
            return False
        try:
            a, b = int(val), int(req.values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def matches_affinity(pod: Pod, node: Node) -> bool:
    labels = node.labels
    for k, v in pod.node_selector.items():
        if labels.get(k) != v:
            return False
    if pod.affinity_terms:
        return any(
            all(_requirement_holds(r, labels) for r in term.match_expressions) for term in pod.affinity_terms
        )
    return True


def untolerated_taint(pod: Pod, node: Node):
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        ok = False
        for tol in pod.tolerations:
            if tol.effect and tol.effect != taint.effect:
                continue
            if tol.operator == "Exists":
                if not tol.key or tol.key == taint.key:
                    ok = True
                    break
            elif tol.key == taint.key and tol.value == taint.value:
                ok = True
                break
        if not ok:
            return taint
    return None


def static_reason(task: Task, node: Node) -> str | None:
    if not node.ready:
        return reasons.NODE_NOT_READY
    if node.unschedulable:
        return reasons.NODE_UNSCHEDULABLE
    pod = task.pod
    if not matches_affinity(pod, node):
        return reasons.NODE_SELECTOR
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return reasons.node_taint(taint.key, taint.value)
    if task.is_fraction:
        if node.mig_enabled:
            return reasons.NODE_MIG
        if task.frac_mem is not None and node.gpu_memory_mib is None:
            return reasons.NODE_GPU_MEMORY_NOT_SYNCED
    return None


def static_signature(task: Task) -> tuple:
    pod = task.pod
    return (
        tuple(sorted(pod.node_selector.items())),
        pod.affinity_terms,
        pod.tolerations,
        task.is_fraction,
        task.frac_mem is not None,
    )


def request_signature(task: Task) -> tuple:
    return (
        static_signature(task),
        task.cpu,
        task.mem,
        task.gpus,
        task.frac_milli,
        task.frac_mem,
        task.devices,
        task.compute_mode,
    )


class NodeFilter:
    """Per-cycle cache: static signature -> (statically feasible nodes, reason counts of the others)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._cache: dict[tuple, tuple[list[NodeState], dict[str, int]]] = {}
        self.rankings: dict[tuple, object] = {}

    def candidates(self, task: Task) -> tuple[list[NodeState], dict[str, int]]:
        sig = static_signature(task)
        hit = self._cache.get(sig)
        if hit is None:
            ok: list[NodeState] = []
            counts: dict[str, int] = {}
            for ns in self.session.nodes:
                r = static_reason(task, ns.node)
                if r is None:
                    ok.append(ns)
                else:
                    counts[r] = counts.get(r, 0) + 1
            hit = (ok, counts)
            self._cache[sig] = hit
        return hit


def dynamic_reason(task: Task, ns: NodeState) -> str:
    """Why a statically feasible node cannot take the task now (first failing resource)."""
    if task.gpus > ns.idle_gpus + ns.rel_gpus:
        return reasons.NODE_GPUS
    if task.cpu > ns.idle_cpu + ns.rel_cpu:
        return reasons.NODE_CPU
    if task.mem > ns.idle_mem + ns.rel_mem:
        return reasons.NODE_MEMORY
    if ns.idle_pods + ns.rel_pods < 1:
        return reasons.NODE_PODS
    if task.is_fraction:
        share = task.device_milli(ns)
        other = SM_SHARING if task.compute_mode == TIME_SLICING else TIME_SLICING
        if share is not None and fraction_fit(ns, share, task.devices, False, other) is not None:
            return reasons.node_compute_mode(task.compute_mode)
        if task.frac_mem is not None:
            return reasons.NODE_GPU_MEMORY
        return reasons.NODE_GPUS
    return reasons.NODE_PODS


def _node_key(task: Task, ns: NodeState, spread: bool) -> tuple[int, float, bool] | None:
    """(summed score without nominatednode, placement rank, pipelined) of a node for a task; None if it cannot fit."""
    g, c, m = task.gpus, task.cpu, task.mem
    ig = ns.idle_gpus
    if g > ig + ns.rel_gpus:
        return None
    ic, im = ns.idle_cpu, ns.idle_mem
    if c > ic + ns.rel_cpu or m > im + ns.rel_mem:
        return None
    pipelined = g > ig or c > ic or m > im
    score = 0
    slots = 1
    frac = task.devices > 0
    cpu_only = g == 0 and not frac
    if frac:
        share = task.device_milli(ns)
        if share is None:
            return None
        fit = fraction_fit(ns, share, task.devices, spread, task.compute_mode)
        if fit is None:
            return None
        new, frac_pipe, has_existing, free = fit
        slots += new
        pipelined = pipelined or frac_pipe
        if has_existing and not spread:
            score += SCORE_SHARING
    elif cpu_only:
        free = ic
    else:
        free = ig
    ip = ns.idle_pods
    if slots > ip:
        if slots > ip + ns.rel_pods:
            return None
        pipelined = True
    if not pipelined:
        score += SCORE_AVAILABLE
    node = ns.node
    if cpu_only and node.gpus == 0:
        score += SCORE_RESOURCE_TYPE
    if spread:
        total = node.cpu_milli if cpu_only else node.gpus * (DEVICE_MILLI if frac else 1)
        rank = free / total if total else 0.0
    else:
        rank = float(-free)
    return score, rank, pipelined


class _Ranking:
    """Fitting nodes of one request signature in a heap, refreshed from the session's dirty-node log."""

    __slots__ = ("heap", "stamps", "seen")

    def __init__(self) -> None:
        self.heap: list[tuple[int, float, int, int, bool]] = []
        self.stamps: dict[int, int] = {}
        self.seen = 0


def _placement_on(session: Session, ns: NodeState, task: Task, pipelined: bool) -> Placement | None:
    picks: list[GroupPick] = []
    if task.devices > 0:
        got = pick_groups(ns, task, session.config.gpu_placement)
        if got is None:  # pragma: no cover - fraction_fit and pick_groups agree
            return None
        picks, frac_pipe = got
        pipelined = pipelined or frac_pipe
    return Placement(ns, picks, pipelined)


def find_node(session: Session, nodes: NodeFilter, task: Task) -> Placement | None:
    """The best node for `task` now, or None.

    Scores depend only on the request signature and the node's state, so each signature keeps a heap
    of node keys; only nodes the statement changed since the last query are re-scored.
    """
    cands, _ = nodes.candidates(task)
    cfg = session.config
    cpu_only = task.gpus == 0 and task.devices == 0
    spread = (cfg.cpu_placement if cpu_only else cfg.gpu_placement) == "spread"
    nominated = task.pod.nominated_node
    rk_key = request_signature(task)
    rk = nodes.rankings.get(rk_key)
    dirty = session.dirty
    if rk is None:
        rk = _Ranking()
        heap = rk.heap
        for ns in cands:
            rk.stamps[ns.index] = 0
            key = _node_key(task, ns, spread)
            if key is not None:
                heap.append((-key[0], -key[1], ns.index, 0, key[2]))
        heapq.heapify(heap)
        rk.seen = len(dirty)
        nodes.rankings[rk_key] = rk
    elif rk.seen < len(dirty):
        stamps = rk.stamps
        all_nodes = session.nodes
        for idx in set(dirty[rk.seen :]):
            stamp = stamps.get(idx)
            if stamp is None:
                continue  # statically infeasible for this signature
            stamp += 1
            stamps[idx] = stamp
            key = _node_key(task, all_nodes[idx], spread)
            if key is not None:
                heapq.heappush(rk.heap, (-key[0], -key[1], idx, stamp, key[2]))
        rk.seen = len(dirty)
    if nominated is not None:
        ns = session.node_by_name.get(nominated)
        if ns is not None and ns.index in rk.stamps:
            key = _node_key(task, ns, spread)
            if key is not None:
                return _placement_on(session, ns, task, key[2])
    heap, stamps = rk.heap, rk.stamps
    while heap and heap[0][3] != stamps[heap[0][2]]:
        heapq.heappop(heap)
    if not heap:
        return None
    top = heap[0]
    return _placement_on(session, session.nodes[top[2]], task, top[4])


def fit_error(session: Session, nodes: NodeFilter, task: Task) -> str:
    """The aggregated fit error for a task that fits nowhere (every node's first failing reason)."""
    cands, static_counts = nodes.candidates(task)
    counts = dict(static_counts)
    for ns in cands:
        r = dynamic_reason(task, ns)
        counts[r] = counts.get(r, 0) + 1
    return reasons.fit_error(counts)

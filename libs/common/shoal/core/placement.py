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

from shoal.core import reasons
from shoal.core.gpusharing import fraction_fit, pick_groups
from shoal.core.model import Node, NodeSelectorRequirement, Pod
from shoal.core.session import DEVICE_MILLI, NodeState, Session, Task
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
    return (static_signature(task), task.cpu, task.mem, task.gpus, task.frac_milli, task.frac_mem, task.devices)


class NodeFilter:
    """Per-cycle cache: static signature -> (statically feasible nodes, reason counts of the others)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._cache: dict[tuple, tuple[list[NodeState], dict[str, int]]] = {}

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
        if task.frac_mem is not None:
            return reasons.NODE_GPU_MEMORY
        return reasons.NODE_GPUS
    return reasons.NODE_PODS


def find_node(session: Session, nodes: NodeFilter, task: Task) -> Placement | None:
    """The best node for `task` now, or None."""
    cands, _ = nodes.candidates(task)
    cfg = session.config
    g, c, m = task.gpus, task.cpu, task.mem
    frac = task.is_fraction
    cpu_only = g == 0 and not frac
    strategy = cfg.cpu_placement if cpu_only else cfg.gpu_placement
    spread = strategy == "spread"
    sharing_order = frac and not spread
    devices = task.devices
    nominated = task.pod.nominated_node
    best_ns: NodeState | None = None
    best_score = -1
    best_rank = 0.0
    best_pipe = False
    # a perfect binpack hit (fits idle, nothing freer can beat it) ends the scan early
    perfect_score = SCORE_AVAILABLE + (SCORE_SHARING if sharing_order else 0)
    for ns in cands:
        ig = ns.idle_gpus
        if g > ig + ns.rel_gpus:
            continue
        ic, im = ns.idle_cpu, ns.idle_mem
        if c > ic + ns.rel_cpu or m > im + ns.rel_mem:
            continue
        pipelined = g > ig or c > ic or m > im
        score = 0
        slots = 1
        if frac:
            share = task.device_milli(ns)
            if share is None:
                continue
            fit = fraction_fit(ns, share, devices, spread)
            if fit is None:
                continue
            new, frac_pipe, has_existing, free = fit
            slots += new
            pipelined = pipelined or frac_pipe
            if sharing_order and has_existing:
                score += SCORE_SHARING
        elif cpu_only:
            free = ic
        else:
            free = ig
        ip = ns.idle_pods
        if slots > ip:
            if slots > ip + ns.rel_pods:
                continue
            pipelined = True
        if not pipelined:
            score += SCORE_AVAILABLE
        node = ns.node
        if cpu_only and node.gpus == 0:
            score += SCORE_RESOURCE_TYPE
        if nominated is not None and nominated == ns.name:
            score += SCORE_NOMINATED
        if spread:
            total = node.cpu_milli if cpu_only else node.gpus * (DEVICE_MILLI if frac else 1)
            rank = free / total if total else 0.0
        else:
            rank = -free
        if score > best_score or (score == best_score and rank > best_rank):
            best_ns, best_score, best_rank, best_pipe = ns, score, rank, pipelined
            if not spread and nominated is None and not cpu_only and score == perfect_score:
                if (frac and free <= 0) or (not frac and free == g):
                    break
    if best_ns is None:
        return None
    picks: list[GroupPick] = []
    if frac:
        got = pick_groups(best_ns, task, cfg.gpu_placement)
        if got is None:  # pragma: no cover - fraction_fit and pick_groups agree
            return None
        picks, frac_pipe = got
        best_pipe = best_pipe or frac_pipe
    return Placement(best_ns, picks, best_pipe)


def fit_error(session: Session, nodes: NodeFilter, task: Task) -> str:
    """The aggregated fit error for a task that fits nowhere (every node's first failing reason)."""
    cands, static_counts = nodes.candidates(task)
    counts = dict(static_counts)
    for ns in cands:
        r = dynamic_reason(task, ns)
        counts[r] = counts.get(r, 0) + 1
    return reasons.fit_error(counts)

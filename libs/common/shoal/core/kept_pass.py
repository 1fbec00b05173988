"""The session's pass over the pods, kept between cycles (what a service planning revision after revision passes).

`Session._place_pods` reads every pod once — node occupancy, each queue's own figures, where each
PodGroup's pods are — about 0.5 s at 140k pods, for a revision that changed a few dozen of them.
`KeptPass` keeps that pass's results per node and per PodGroup key, each with the pods it was counted
from, and redoes only what a revision touched: the nodes and PodGroup keys of pods that came or went, the
PodGroups that came, went or changed, the nodes that changed. `assemble` hands over every unchanged pod,
PodGroup and node as the same object from one revision to the next, so "changed" is "not the object
counted last time" (identity; a field-by-field comparison would cost what the pass costs). Both revisions'
pods (and PodGroups) are in snapshot order, so one walk over the two tuples side by side finds them
(`changes`): unchanged objects line up, and only where they do not are sort keys compared.

What every pod's figures read besides its node and PodGroup — the node names, the reservation namespace,
the priority classes, the queue names, the GPU memory bounds — is compared whole each cycle; when one
differs, or most pods changed (a new base), everything is counted again. With duplicate PodGroup keys
(only hand-written snapshots have them) the session does its own pass.

`Session._place_pods` is the reference: `tests/unit/core/test_kept_pass.py` checks on random revisions
that a session filled from the kept pass equals the one that pass builds, and that the plans are the same.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TypeVar

from shoal.core import model
from shoal.core.model import Node, Pod, PodGroup, group_order, pod_order
from shoal.core.session import DEVICE_MILLI, NodeState, Session, occupy_node
from shoal.core.victims import build_rank

DONE = (model.PHASE_SUCCEEDED, model.PHASE_FAILED)
T = TypeVar("T")
V = TypeVar("V")


class _Figures:
    """One PodGroup's share of the pass: its queue's own figures and what the session reads of it."""

    __slots__ = ("queue", "pending", "marked", "semi", "candidates", "rank", "req", "alloc", "np")

    def __init__(self, session: Session, group: PodGroup, pods: list[Pod]) -> None:
        self.queue = group.queue if group.queue in session.own else None
        self.marked = bool(group.subgroups or group.min_member > 1 or group.stale_timestamp
                           or group.condition_reason or group.bind_failures)
        self.semi = group.preemptibility == model.SEMI_PREEMPTIBLE
        preemptible = session.priority_of(group)[1]
        req, alloc, np = [0, 0, 0], [0, 0, 0], [0, 0, 0]
        pending, candidates = False, 0
        for pod in pods:
            if not pod.node_name:
                pending = True
                if not pod.gated:
                    req[0] += pod.cpu_milli
                    req[1] += pod.memory_bytes
                    req[2] += session.gpu_fair_of(pod)
                continue
            if pod.deleting or (pod.background and not pod.eviction_blocked):
                continue  # releasing, or planned as if absent: counts in no queue
            if preemptible:
                if pod.eviction_blocked:
                    pending = True  # made up front: no eviction may take it
                else:
                    candidates += 1
            gf = pod.gpus * DEVICE_MILLI if pod.fraction is None else session.gpu_fair_of(pod)
            alloc[0] += pod.cpu_milli
            alloc[1] += pod.memory_bytes
            alloc[2] += gf
            if not preemptible:
                np[0] += pod.cpu_milli
                np[1] += pod.memory_bytes
                np[2] += gf
        self.pending, self.candidates = pending, candidates
        self.rank = build_rank(group, candidates, session.priority_of) if candidates else None
        self.req, self.alloc, self.np = req, alloc, np

    def add_to(self, own: dict[str, list[list[int]]], sign: int) -> None:
        if self.queue is None:
            return
        for total, mine in zip(own[self.queue], (self.req, self.alloc, self.np), strict=True):
            total[0] += sign * mine[0]
            total[1] += sign * mine[1]
            total[2] += sign * mine[2]


def _flagged(group: PodGroup) -> bool:
    """Read even without live pods: core pods to clear, a stale stamp, a condition, subgroups."""
    return bool(group.core_pods or group.stale_timestamp or group.condition_reason or group.subgroups)


def _group_key(pod: Pod) -> str:
    return f"{pod.namespace}/{pod.pod_group}"


def _remove(pods: list[Pod], pod: Pod) -> None:
    for i, other in enumerate(pods):
        if other is pod:
            del pods[i]
            return


def changes(old: Sequence[T], new: Sequence[T], order: Callable[[T], tuple], most: int,
            carry: tuple[Sequence[V], Callable[[T], V]] | None = None) -> tuple[list[T], list[T], list[V]] | None:
    """(came, gone, values): the objects of `new` that are not in `old`, and those of `old` not in `new`,
    by identity, for two sequences sorted by `order`; None once more than `most` came. With `carry`
    (a value per object of `old`, in order, and how to get an object's value), `values` has one per
    object of `new`: carried over where the object stayed, else computed. One walk side by side: where
    the objects differ, the one that sorts first is new or gone (equal keys: a replaced object). An
    object out of order is reported both gone and come, which a caller that removes the gone before
    adding the new counts right."""
    came: list[T] = []
    gone: list[T] = []
    values: list[V] = []
    kept_values, value_of = carry if carry is not None else ((), None)
    i = j = 0
    n_old, n_new = len(old), len(new)
    while i < n_old and j < n_new:
        a, b = old[i], new[j]
        if a is b:
            if value_of is not None:
                values.append(kept_values[i])
            i += 1
            j += 1
            continue
        key_a, key_b = order(a), order(b)
        if key_a < key_b:
            gone.append(a)
            i += 1
            continue
        came.append(b)
        if value_of is not None:
            values.append(value_of(b))
        j += 1
        if not key_b < key_a:  # the same key: the object was replaced
            gone.append(a)
            i += 1
        if len(came) > most:
            return None
    gone.extend(old[i:])
    came.extend(new[j:])
    if value_of is not None:
        values.extend(map(value_of, new[j:]))
    return (came, gone, values) if len(came) <= most else None


_KEY = attrgetter("key")


class KeptPass:
    """The pod pass of the cycles so far, for one shard (see the module docstring)."""

    redo_fraction = 4  # more than 1/4 of the pods new (a new base): count everything again, not one by one (0: never)

    def __init__(self) -> None:
        self.basis: tuple | None = None  # what every pod's figures read, compared whole
        # the pods and PodGroups counted last, in snapshot order
        self.pods: tuple[Pod, ...] = ()
        self.groups: tuple[PodGroup, ...] = ()
        self.keys: list[str] = []  # the keys of `groups`, in order
        # the PodGroups of the snapshot being filled and what came and went since `groups` (group_keys)
        self.next_groups: tuple[tuple[PodGroup, ...], list[PodGroup], list[PodGroup], list[str]] | None = None
        self.nodes: dict[str, Node] = {}
        self.group_of: dict[str, PodGroup] = {}  # "ns/name" → its PodGroup
        self.on_node: dict[str, list[Pod]] = {}  # node name → its live pods, snapshot order
        self.in_key: dict[str, list[Pod]] = {}  # "ns/pod_group" → live pods naming it, snapshot order
        self.templates: dict[str, NodeState] = {}  # node name → its state after the pass
        self.background: dict[str, list[Pod]] = {}  # node name → its pods planned as if absent
        self.figures: dict[str, _Figures] = {}  # PodGroup key (with live pods) → its figures
        self.own: dict[str, list[list[int]]] = {}  # queue → [request, allocated, allocated non-preemptible]
        self.missing: set[str] = set()  # keys with live pods and no PodGroup
        self.flagged: set[str] = set()  # PodGroups with core pods, a stale stamp, a condition or subgroups

    def group_keys(self, groups: tuple[PodGroup, ...]) -> list[str]:
        """The keys of the snapshot's PodGroups, in order (what changed since the last fill is kept for the
        next one: the session's JobIndex is built from the keys before the session is filled)."""
        found = changes(self.groups, groups, group_order, len(groups), carry=(self.keys, _KEY))
        assert found is not None  # every PodGroup may be new
        came, gone, keys = found
        self.next_groups = (groups, came, gone, keys)
        return keys

    def fill(self, session: Session) -> bool:
        """Give `session` the pass's results for its snapshot (built with `group_keys` of its PodGroups);
        False: the session counts its own pods."""
        snapshot = session.snapshot
        if session.jobs.count != len(snapshot.pod_groups):
            self.basis, self.next_groups = None, None
            return False
        basis = (tuple(n.name for n in snapshot.nodes), session.config.reservation_namespace,
                 session._priorities, session._default_priority, tuple(session.queues),
                 session.min_gpu_mem, session.max_gpu_mem)
        found, self.next_groups = self.next_groups, None
        assert found is not None and found[0] is snapshot.pod_groups  # the session asked group_keys first
        _, groups_came, groups_gone, keys = found
        if basis != self.basis or not self._update(session, groups_came, groups_gone):
            self.basis = basis
            self._count_all(session)
        self.pods, self.groups, self.keys = snapshot.pods, snapshot.pod_groups, keys
        self._give(session)
        return True

    # ---- counting --------------------------------------------------------------------------------
    def _count_all(self, session: Session) -> None:
        snapshot = session.snapshot
        self.nodes = {n.name: n for n in snapshot.nodes}
        self.group_of = {g.key: g for g in snapshot.pod_groups}
        self.on_node, self.in_key = {name: [] for name in self.nodes}, {}
        for pod in snapshot.pods:
            if self._live(pod):
                if pod.node_name:
                    self.on_node[pod.node_name].append(pod)
                self.in_key.setdefault(_group_key(pod), []).append(pod)
        self.templates, self.background = {}, {}
        for name in self.nodes:
            self._count_node(session, name)
        self.own = {name: [[0, 0, 0], [0, 0, 0], [0, 0, 0]] for name in session.queues}
        self.figures, self.missing = {}, set()
        for key in self.in_key:
            self._count_key(session, key)
        self.flagged = {g.key for g in snapshot.pod_groups if _flagged(g)}

    def _live(self, pod: Pod) -> bool:
        """Counted this cycle: not finished, on no node or on a node of the shard."""
        return pod.phase not in DONE and (not pod.node_name or pod.node_name in self.nodes)

    def _count_node(self, session: Session, name: str) -> None:
        node = self.nodes[name]
        state = NodeState(-1, node)
        res_ns = session.config.reservation_namespace
        background = []
        for pod in self.on_node[name]:
            if (pod.background and not pod.deleting and not pod.eviction_blocked and pod.pod_group
                    and _group_key(pod) in self.group_of):
                occupy_node(state, pod, res_ns, releasing=True)
                background.append(pod)
            else:
                occupy_node(state, pod, res_ns)
        self.templates[name] = state
        if background:
            self.background[name] = background
        else:
            self.background.pop(name, None)

    def _count_key(self, session: Session, key: str) -> None:
        old = self.figures.pop(key, None)
        if old is not None:
            old.add_to(self.own, -1)
        pods = self.in_key.get(key)
        if not pods:
            self.in_key.pop(key, None)
            self.missing.discard(key)
            return
        group = self.group_of.get(key)
        if group is None:
            self.missing.add(key)
            return
        self.missing.discard(key)
        figures = self.figures[key] = _Figures(session, group, pods)
        figures.add_to(self.own, +1)

    def _update(self, session: Session, groups_came: list[PodGroup], groups_gone: list[PodGroup]) -> bool:
        """Bring the kept results up to the session's snapshot (the PodGroups that came and went given);
        False: too much changed, count it all."""
        snapshot = session.snapshot
        most = len(snapshot.pods) // self.redo_fraction if self.redo_fraction else len(snapshot.pods)
        pods = changes(self.pods, snapshot.pods, pod_order, most)
        if pods is None:
            return False
        came, gone, _ = pods
        touched_nodes: set[str] = set()
        touched_keys: set[str] = set()
        for group in groups_gone:
            key = group.key
            del self.group_of[key]  # a changed PodGroup comes back below
            self.flagged.discard(key)
            touched_keys.add(key)
        for group in groups_came:
            key = group.key
            self.group_of[key] = group
            if _flagged(group):
                self.flagged.add(key)
            touched_keys.add(key)
        for node in snapshot.nodes:
            if self.nodes[node.name] is not node:
                self.nodes[node.name] = node
                touched_nodes.add(node.name)
        for key in touched_keys:  # a PodGroup that came or went changes how its background pods count
            touched_nodes.update(p.node_name for p in self.in_key.get(key, ()) if p.background and p.node_name)
        for pod in gone:
            if self._live(pod):
                if pod.node_name:
                    _remove(self.on_node[pod.node_name], pod)
                    touched_nodes.add(pod.node_name)
                key = _group_key(pod)
                _remove(self.in_key[key], pod)
                touched_keys.add(key)
        for pod in came:
            if self._live(pod):
                if pod.node_name:
                    insort(self.on_node[pod.node_name], pod, key=pod_order)
                    touched_nodes.add(pod.node_name)
                key = _group_key(pod)
                insort(self.in_key.setdefault(key, []), pod, key=pod_order)
                touched_keys.add(key)
        for name in touched_nodes:
            self._count_node(session, name)
        for key in touched_keys:
            self._count_key(session, key)
        return True

    # ---- the session -----------------------------------------------------------------------------
    def _give(self, session: Session) -> None:
        templates = self.templates
        for state in session.nodes:
            kept = templates[state.name]
            state.idle_cpu, state.idle_mem, state.idle_gpus, state.idle_pods = (
                kept.idle_cpu, kept.idle_mem, kept.idle_gpus, kept.idle_pods)
            state.rel_cpu, state.rel_mem, state.rel_gpus, state.rel_pods = (
                kept.rel_cpu, kept.rel_mem, kept.rel_gpus, kept.rel_pods)
            if kept.groups:
                state.groups = {gid: g.copy() for gid, g in kept.groups.items()}
        by_name = session.node_by_name
        session.background = sorted(((by_name[name], pod) for name, pods in self.background.items() for pod in pods),
                                    key=lambda entry: pod_order(entry[1]))
        session.orphan_pods = sorted((p for key in self.missing for p in self.in_key[key]
                                      if not p.node_name and p.managed), key=pod_order)
        session.own = {name: [list(req), list(alloc), list(np)] for name, (req, alloc, np) in self.own.items()}
        index = session.jobs
        index.members = self.in_key
        position = index.position
        pending, marked, semi, candidates, ranks = set(), set(), set(), {}, {}
        for key, figures in self.figures.items():
            if not (figures.candidates or figures.pending or figures.marked or figures.semi):
                continue
            gi = position(key)
            if figures.candidates:
                candidates[gi] = figures.candidates
                ranks[gi] = figures.rank
            if figures.pending:
                pending.add(gi)
            if figures.marked:
                marked.add(gi)
            if figures.semi:
                semi.add(gi)
        session.running_preemptible = candidates
        session.victim_ranks = ranks
        unpodded = sorted(position(key) for key in self.flagged if key not in self.in_key)
        session.finish(pending, marked, semi, unpodded, False)

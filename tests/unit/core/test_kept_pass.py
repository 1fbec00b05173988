"""The pod pass kept between cycles (`kept_pass.KeptPass`) never changes a session or a plan.

After any sequence of revisions — pods that come, go, bind, finish, start deleting, turn background or
PDB-blocked, move between PodGroups or name missing ones; PodGroups that come, go or change queue, minimum,
preemptibility, stamps or core pods; nodes that change; priority classes, queues and the reservation
namespace that change — a session filled from one KeptPass, revision after revision, equals the session
the plain pass builds from that revision alone, field by field, and the two cycles give the same plan.
Unchanged objects stay the same objects from one revision to the next, as `assemble` hands them over.
"""

from __future__ import annotations

import msgspec
from builders import PRIORITY_CLASSES, queue
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.core.cycle import run_cycle
from shoal.core.kept_pass import KeptPass
from shoal.core.model import (
    FractionRequest,
    Node,
    Pod,
    PodGroup,
    PriorityClass,
    ShardConfig,
    SubGroup,
    make_snapshot,
)
from shoal.core.session import Session
from shoal.core.victims import build_rank

QUEUES = ("a", "b", "c")
CLASSES = sorted(c.name for c in PRIORITY_CLASSES)
RES_NS = "kai-resource-reservation"


def _node(i: int, gpus: int = 4, mem: int = 40960) -> Node:
    return Node(name=f"n{i}", gpus=gpus, cpu_milli=64_000, memory_bytes=2**36, gpu_memory_mib=mem)


group_fields = st.fixed_dictionaries({
    "queue": st.sampled_from((*QUEUES, "nowhere")),
    "min_member": st.integers(0, 3),
    "priority_class_name": st.sampled_from(CLASSES),
    "preemptibility": st.sampled_from(["", "", "preemptible", "non-preemptible", "semi-preemptible"]),
    "created": st.integers(0, 3),
    "stale_timestamp": st.sampled_from([None, None, None, "1970-01-01T00:00:00Z"]),
    "condition_reason": st.sampled_from([None, None, None, "Unschedulable"]),
    "core_pods": st.sampled_from([(), (), ("x-0",)]),
    "bind_failures": st.sampled_from([0, 0, 0, 1]),
    "subgroups": st.sampled_from([(), (), (), (SubGroup(name="x", min_member=1), SubGroup(name="y", min_member=1))]),
})
pod_fields = st.fixed_dictionaries({
    "ns": st.sampled_from(["ns", "ns", "other", RES_NS]),
    "group": st.sampled_from(["g0", "g1", "g2", "g3", "g4", "missing", ""]),
    "node": st.sampled_from([None, None, "n0", "n1", "n2", "n3", "gone"]),
    "gpus": st.integers(0, 2),
    "share": st.sampled_from([None, None, None, "s0", "s1", ("s0", "s1")]),
    "mem_fraction": st.booleans(),
    "phase": st.sampled_from(["Running"] * 6 + ["Succeeded", "Failed"]),
    "deleting": st.sampled_from([False] * 6 + [True]),
    "blocked": st.sampled_from([False] * 4 + [True]),
    "background": st.sampled_from([False] * 3 + [True]),
    "gated": st.sampled_from([False] * 6 + [True]),
    "managed": st.sampled_from([True] * 6 + [False]),
    "subgroup": st.sampled_from([None, "x", "y"]),
})


def _group(ns: str, name: str, f: dict) -> PodGroup:
    return PodGroup(namespace=ns, name=name, uid=f"{ns}-{name}-{f['created']}", **f)


def _pod(serial: int, f: dict) -> Pod:
    node = f["node"]
    share = f["share"] if node else None
    groups = (share,) if isinstance(share, str) else tuple(share or ())
    if groups and node:
        groups = tuple(f"{node}-{g}" for g in groups)
    fraction = None
    if share is not None or (not node and f["mem_fraction"]):
        fraction = (FractionRequest(gpu_memory_mib=8000, num_devices=max(1, len(groups))) if f["mem_fraction"]
                    else FractionRequest(portion_milli=500, num_devices=max(1, len(groups))))
    return Pod(uid=f"p{serial}", namespace=f["ns"], name=f"p{serial}", pod_group=f["group"] if f["managed"] else "",
               subgroup=f["subgroup"], cpu_milli=500, memory_bytes=2**30, gpus=0 if fraction else f["gpus"],
               fraction=fraction, gpu_groups=groups, node_name=node,
               phase=f["phase"] if node else "Pending", deleting=bool(node) and f["deleting"],
               eviction_blocked=bool(node) and f["blocked"], background=f["background"],
               gated=not node and f["gated"], managed=f["managed"], created=serial % 4)


pod_edit = st.tuples(st.just("pod"), st.integers(0, 30), pod_fields)  # made or replaced (same uid: changed)
basis_edit = st.one_of(  # what every pod's figures read: the kept pass counts everything again
    st.tuples(st.just("node-mem"), st.integers(0, 3), st.sampled_from([40960, 81920])),
    st.tuples(st.just("nodes"), st.integers(2, 4)),
    st.tuples(st.just("class"), st.integers(0, 200)),
    st.tuples(st.just("queues"), st.sampled_from([QUEUES, QUEUES[:2]])),
    st.tuples(st.just("res-ns"), st.sampled_from([RES_NS, "other"])),
)
WEIGHTED = (  # (share of the edits in %, edit): mostly pods, few edits of the basis
    (45, pod_edit),
    (15, st.tuples(st.just("pod-gone"), st.integers(0, 30))),
    (15, st.tuples(st.just("group"), st.sampled_from(["ns", "other"]),
                   st.sampled_from(["g0", "g1", "g2", "g3", "g4"]), group_fields)),
    (8, st.tuples(st.just("group-gone"), st.sampled_from(["ns", "other"]), st.sampled_from(["g0", "g1", "g2", "g3"]))),
    (5, st.tuples(st.just("node"), st.integers(0, 3), st.integers(1, 8))),  # a node changed: counted again alone
    (7, st.tuples(st.just("copy"), st.integers(0, 30))),  # an equal pod as a new object (same figures)
    (5, basis_edit),
)


def _weighted(roll: int) -> st.SearchStrategy:
    for share, strategy in WEIGHTED:
        if roll < share:
            return strategy
        roll -= share
    return WEIGHTED[0][1]


edit = st.integers(0, 99).flatmap(_weighted)
revisions = st.lists(st.lists(edit, min_size=1, max_size=8), min_size=2, max_size=12)
initial = st.tuples(st.lists(pod_fields, min_size=0, max_size=30),
                    st.lists(st.tuples(st.sampled_from(["ns", "other"]), group_fields), max_size=5))


class Cluster:
    """A cluster revised edit by edit; unchanged objects stay the same objects."""

    def __init__(self, pods: list[dict], groups: list[tuple[str, dict]]) -> None:
        self.pods = {f"p{i}": _pod(i, f) for i, f in enumerate(pods)}
        self.groups = {f"{ns}/g{i}": _group(ns, f"g{i}", f) for i, (ns, f) in enumerate(groups)}
        self.nodes = [_node(i) for i in range(4)]
        self.classes = list(PRIORITY_CLASSES)
        self.queues = QUEUES
        self.res_ns = RES_NS

    def apply(self, ev: tuple) -> None:  # noqa: C901
        kind = ev[0]
        if kind == "pod":
            self.pods[f"p{ev[1]}"] = _pod(ev[1], ev[2])
        elif kind == "pod-gone":
            self.pods.pop(f"p{ev[1]}", None)
        elif kind == "group":
            self.groups[f"{ev[1]}/{ev[2]}"] = _group(ev[1], ev[2], ev[3])
        elif kind == "group-gone":
            self.groups.pop(f"{ev[1]}/{ev[2]}", None)
        elif kind == "node":
            self.nodes = [_node(i, gpus=ev[2], mem=n.gpu_memory_mib) if i == ev[1] else n
                          for i, n in enumerate(self.nodes)]
        elif kind == "node-mem":
            self.nodes = [_node(i, gpus=n.gpus, mem=ev[2]) if i == ev[1] else n for i, n in enumerate(self.nodes)]
        elif kind == "nodes":
            self.nodes = [*self.nodes[:ev[1]], *(_node(i) for i in range(len(self.nodes), ev[1]))]
        elif kind == "class":
            self.classes = [*PRIORITY_CLASSES, PriorityClass(name="extra", value=ev[1])]
            if ev[1] % 2:
                self.classes[0] = PriorityClass(name=self.classes[0].name, value=ev[1])
        elif kind == "queues":
            self.queues = ev[1]
        elif kind == "res-ns":
            self.res_ns = ev[1]
        elif kind == "copy":
            pod = self.pods.get(f"p{ev[1]}")
            if pod is not None:
                self.pods[pod.uid] = msgspec.structs.replace(pod)

    def snapshot(self, revision: int):  # noqa: ANN201
        queues = [queue("root", parent=None)] + [queue(q, gpu=(2, -1, 1)) for q in self.queues]
        return make_snapshot(nodes=self.nodes, pods=self.pods.values(), pod_groups=self.groups.values(),
                             queues=queues, priority_classes=self.classes,
                             config=ShardConfig(default_staleness_grace_s=0, reservation_namespace=self.res_ns),
                             now=1000, revision=revision)


def state(session: Session) -> dict:
    """Everything the pod pass gives a session, in comparable form."""
    jobs = session.jobs
    return {
        "nodes": [(n.name, n.idle_cpu, n.idle_mem, n.idle_gpus, n.idle_pods, n.rel_cpu, n.rel_mem, n.rel_gpus,
                   n.rel_pods, [(g.id, g.index, g.used, g.releasing, g.members, g.active_members, g.new,
                                 g.pipelined, g.mode) for g in n.groups.values()]) for n in session.nodes],
        "own": session.own,
        "queues": {q: (s.request, s.alloc, s.alloc_np) for q, s in session.queues.items()},
        "orphans": [p.key for p in session.orphan_pods],
        "background": [(n.name, p.key) for n, p in session.background],
        "candidates": dict(session.running_preemptible),
        "ranks": {gi: session.victim_ranks.get(gi) or build_rank(jobs.groups[gi], running, session.priority_of)
                  for gi, running in session.running_preemptible.items()},
        "pending": [j.key for j in session.pending_jobs],
        "semi": session.semi_positions,
        "stale_cores": session.stale_cores,
        "index": [(key, jobs.position(key)) for key in jobs],
        "positions": sorted(jobs.positions()),
        "made": list(jobs.made),
        "pods_of": [[p.key for p in jobs.pods_of(gi)] for gi in range(len(jobs.groups))],
        "tasks": {j.key: [(t.key, t.status, t.node.name if t.node else None) for t in j.tasks]
                  for j in jobs.made.values()},
    }


def _revised(start: tuple, steps: list[list[tuple]], one_by_one: bool):  # noqa: ANN202
    """(snapshot, the KeptPass that saw every earlier revision) for each revision in turn."""
    cluster = Cluster(*start)
    kept = KeptPass()
    if one_by_one:  # never counted again from scratch, however much changed
        kept.redo_fraction = 0
    for revision, edits in enumerate(steps, start=1):
        for ev in edits:
            cluster.apply(ev)
        yield cluster.snapshot(revision), kept


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(initial, revisions, st.booleans())
def test_a_kept_pass_fills_the_session_the_plain_pass_builds(start: tuple, steps: list[list[tuple]],
                                                            one_by_one: bool) -> None:
    for snap, kept in _revised(start, steps, one_by_one):
        assert state(Session(snap, kept=kept)) == state(Session(snap))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(initial, revisions, st.booleans())
def test_a_kept_pass_gives_the_same_plans(start: tuple, steps: list[list[tuple]], one_by_one: bool) -> None:
    for snap, kept in _revised(start, steps, one_by_one):
        assert msgspec.json.encode(run_cycle(snap, kept=kept)) == msgspec.json.encode(run_cycle(snap))


def test_duplicate_podgroup_keys_are_counted_by_the_session_itself() -> None:
    groups = [PodGroup(namespace="ns", name="g0", queue="a", uid="one"),
              PodGroup(namespace="ns", name="g0", queue="b", uid="two")]
    pods = [Pod(uid="p0", namespace="ns", name="p0", pod_group="g0", node_name="n0", phase="Running", gpus=1)]
    snap = make_snapshot(nodes=[_node(0)], pods=pods, pod_groups=groups,
                         queues=[queue("root", parent=None), *(queue(q) for q in QUEUES)],
                         priority_classes=PRIORITY_CLASSES, config=ShardConfig(), now=1000, revision=1)
    kept = KeptPass()
    assert not kept.fill(Session(snap))  # the session's own pass; nothing kept
    assert state(Session(snap, kept=kept)) == state(Session(snap))


def test_a_background_pod_counts_again_when_its_podgroup_comes_or_goes() -> None:
    """Planned as if absent only while its PodGroup exists: the pod did not change, its node's room did."""
    fields = {"ns": "ns", "group": "g0", "node": "n0", "gpus": 1, "share": None, "mem_fraction": False,
              "phase": "Running", "deleting": False, "blocked": False, "background": True, "gated": False,
              "managed": True, "subgroup": None}
    group = {"queue": "a", "min_member": 1, "priority_class_name": CLASSES[0], "preemptibility": "",
             "created": 0, "stale_timestamp": None, "condition_reason": None, "core_pods": (), "bind_failures": 0,
             "subgroups": ()}
    cluster = Cluster([fields], [("ns", group)])
    kept = KeptPass()
    kept.redo_fraction = 0
    for revision, ev in enumerate([None, ("group-gone", "ns", "g0"), ("group", "ns", "g0", group)], start=1):
        if ev is not None:
            cluster.apply(ev)
        snap = cluster.snapshot(revision)
        assert state(Session(snap, kept=kept)) == state(Session(snap))


class _Item:
    """An object with a sort key: equal keys are different objects (a replaced pod)."""

    def __init__(self, key: tuple[int, int]) -> None:
        self.key = key


@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 2)), max_size=30),
       st.lists(st.tuples(st.integers(0, 9), st.integers(0, 2)), max_size=30),
       st.lists(st.integers(0, 29), max_size=10), st.integers(0, 40))
def test_changes_finds_what_came_and_went_by_identity_and_carries_values(old_keys, new_keys, shuffled, most):
    from shoal.core.kept_pass import changes

    pool = {k: _Item(k) for k in old_keys}  # objects both revisions may share
    old = sorted((pool[k] if i % 3 else _Item(k) for i, k in enumerate(old_keys)), key=lambda o: o.key)
    new = sorted((pool.get(k) or _Item(k) if i % 2 else _Item(k) for i, k in enumerate(new_keys)), key=lambda o: o.key)
    for i in shuffled:  # out of order: still reported, as gone and come again
        if i + 1 < len(new):
            new[i], new[i + 1] = new[i + 1], new[i]
    got = changes(old, new, lambda o: o.key, most, carry=([id(o) for o in old], id))

    def net(objects):
        counts: dict[int, int] = {}
        for o in objects:
            counts[id(o)] = counts.get(id(o), 0) + 1
        return counts

    # in order with unique keys (a real snapshot's pods): exactly what came and went; else (duplicate
    # keys, objects out of order) an object may be reported gone and come again
    exact = (new == sorted(new, key=lambda o: o.key) and len({o.key for o in old}) == len(old)
             and len({o.key for o in new}) == len(new))
    want_came = [o for o in new if all(o is not p for p in old)]
    if got is None:  # more than `most` came
        assert len(want_came) > most or not exact
        return
    assert len(got[0]) <= most
    came, gone, values = got
    assert values == [id(o) for o in new]  # each object's value, carried over or computed
    before, after = net(old), net(new)
    for o in gone:  # what a caller does: remove the gone, add what came
        before[id(o)] -= 1
    for o in came:
        before[id(o)] = before.get(id(o), 0) + 1
    assert {k: v for k, v in before.items() if v} == after
    if exact:
        assert net(came) == net(want_came)
        assert net(gone) == net([o for o in old if all(o is not p for p in new)])

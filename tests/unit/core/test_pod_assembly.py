"""What `assemble` keeps between cycles never changes its answer: after any sequence of revisions, with the
scheduler names, `require_podgroup`, binds and evictions in flight changing from one cycle to the next, the
Snapshot of a model assembled cycle after cycle equals the one of a fresh copy of that model assembled once,
and a cycle in which nothing changed hands over the very same pod objects; `unplaced_pods` (asked before
`assemble`) counts the managed pods that Snapshot shows on no node."""

from __future__ import annotations

import copy

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from services.snapshotter.translate import Shards
from shoal.core.ingest.assembly import placed
from shoal.core.ingest.config import config_from
from shoal.core.ingest.key_order import KeyOrder
from shoal.core.ingest.pdbs import blocked_pod_keys
from shoal.core.ingest.shard_model import ShardModel, assemble, entry_of, key_of, unplaced_pods
from shoal.core.model import make_snapshot
from tests.unit.services.snapshotter.test_snapshotter_shards import (
    NOW,
    PRIORITY,
    QUEUE,
    SCHED,
    event,
    node,
    pdb,
    pod,
    pod_fields,
    podgroup,
)

CONFIGS = (None, {"apiVersion": "shoal.io/v1alpha1", "kind": "SchedulerConfig",
                  "schedulerNames": [SCHED, "default-scheduler"]})
cycle = st.fixed_dictionaries({
    "switch": st.integers(0, 5),  # 0: the settings below take effect (else the last ones stay: kept work is reused)
    "config": st.sampled_from(CONFIGS),
    "require": st.booleans(),
    "binds": st.sets(st.integers(0, 11), max_size=6),  # pods p<i> with a bind in flight
    "by_name": st.booleans(),  # the bind is known by "ns/name" only (a recreated pod of the same name)
    "evicting": st.sets(st.integers(0, 11), max_size=6),
})
# one shard and few names, so pods name PodGroups that come and go (what the kept work must follow)
few = st.one_of(
    st.tuples(st.just("pod"), st.integers(0, 2),
              pod_fields.map(lambda f: {**f, "pool": None,
                                        "group": f["group"] % 2 if isinstance(f["group"], int) else f["group"] or 0})),
    st.tuples(st.just("group"), st.integers(0, 1), st.integers(0, 2), st.just(None), st.integers(1, 3)),
    st.tuples(st.just("group-gone"), st.integers(0, 1), st.integers(0, 2)),
    st.tuples(st.just("node"), st.integers(0, 1), st.just(None)),
)
steps = st.lists(st.tuples(st.one_of(few, few, event), cycle), min_size=4, max_size=40)


def _manifest(ev: tuple) -> tuple[dict | None, str | None]:
    """(object changed, or None) and the key of an object gone, for one generated watch event."""
    kind = ev[0]
    if kind == "pod":
        return pod(ev[1], ev[2]), None
    if kind == "node":
        return node(ev[1], ev[2]), None
    if kind == "group":
        return podgroup(ev[1], ev[2], ev[3], ev[4]), None
    if kind == "cluster":
        obj = {"queue": QUEUE, "priority": PRIORITY, "pdb0": pdb(0), "pdb1": pdb(1)}[ev[1]]
        return (copy.deepcopy(obj), None) if ev[2] else (None, _key(obj))
    if kind == "pod-gone":
        return None, f"Pod/p{ev[1]}/ns{ev[1] % 3}"
    if kind == "node-gone":
        return None, f"Node/n{ev[1]}/"
    return None, f"PodGroup/pg{ev[1]}/ns{ev[2]}"


def _key(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']}/{meta['name']}/{meta.get('namespace', '')}"


def reference(model: ShardModel, *, config_doc, inflight, evicting, require_podgroup):
    """The Snapshot's pods and PodGroups as one plain pass over the model says (what assemble did before it
    kept anything between cycles)."""
    managed = frozenset(config_from(config_doc)[1].scheduler_names)
    groups, generated, pods = model.pod_groups, {}, []
    for entry in sorted(model.pods.values(), key=lambda e: (e.pod.namespace, e.pod.name, e.pod.uid)):
        pod = entry.pod
        if entry.scheduler not in managed:
            pod = msgspec.structs.replace(pod, managed=False, pod_group="", subgroup=None)
        else:
            group_key = f"{pod.namespace}/{pod.pod_group}"
            if require_podgroup and not pod.node_name and not (entry.named and group_key in groups) \
                    and not entry.bare:
                continue
            if group_key not in groups:
                if entry.named and pod.subgroup != entry.missing_subgroup:
                    pod = msgspec.structs.replace(pod, subgroup=entry.missing_subgroup)
                if entry.generated is not None and (group_key not in generated or pod.key < generated[group_key][0]):
                    generated[group_key] = (pod.key, entry.generated)
        if pod.node_name is None:
            bind = inflight.get(pod.uid) or inflight.get(pod.key)
            if bind is not None:
                pod = placed(pod, *bind)
        elif not pod.deleting and pod.uid in evicting:
            pod = msgspec.structs.replace(pod, deleting=True)
        pods.append(pod)
    blocked = blocked_pod_keys(model.pdbs.values(), ((p.key, p.namespace, p.labels) for p in pods if p.node_name))
    pods = [msgspec.structs.replace(p, eviction_blocked=True) if p.key in blocked else p for p in pods]
    return make_snapshot(pods=pods, pod_groups=[*groups.values(), *(g for _, g in generated.values())])


@settings(max_examples=300, deadline=None)
@given(steps=steps)
def test_assembling_cycle_after_cycle_equals_assembling_afresh(steps):
    objects: dict[str, dict] = {}
    shards = Shards(SCHED, raw_pods=lambda: [o for o in objects.values() if o["kind"] == "Pod"], now=lambda: NOW)
    kept: dict[str, ShardModel] = {}
    config, require = None, True
    for ev, c in steps:
        if c["switch"] == 0:
            config, require = c["config"], c["require"]
        changed, gone = _manifest(ev)
        if changed is not None:
            objects[_key(changed)] = changed
            shards.update(copy.deepcopy(changed))
        if gone in objects:
            shards.remove(objects.pop(gone))
        for shard in shards.active():
            model = kept.setdefault(shard, ShardModel())
            model.apply(shards.take(shard))
            pods = {e.pod.name: e.pod for e in model.pods.values()}
            binds = {}
            for i in sorted(c["binds"]):
                p = pods.get(f"p{i}")
                if p is not None:
                    binds[p.key if c["by_name"] else p.uid] = ("n0", ("g-new",) if p.fraction else ())
            evicting = {p.uid for name, p in pods.items() if int(name[1:]) in c["evicting"]}
            args = {"now": NOW, "revision": 3, "config_doc": config, "inflight": binds, "evicting": evicting,
                    "require_podgroup": require}
            unplaced = unplaced_pods(model, config_doc=config, inflight=binds, require_podgroup=require)
            again = assemble(model, **args)
            afresh = assemble(ShardModel.of(model.entries()), **args)
            assert again.snapshot == afresh.snapshot, shard
            expected = reference(model, config_doc=config, inflight=binds, evicting=evicting,
                                 require_podgroup=require)
            assert (again.snapshot.pods, again.snapshot.pod_groups) == (expected.pods, expected.pod_groups)
            # what the planner asks before a cycle: the managed pods the Snapshot shows on no node
            assert unplaced == sum(1 for p in expected.pods if p.managed and not p.node_name)
            # nothing changed: the same objects again, placed, releasing and PDB-blocked pods included, so
            # the session's kept pass (which tells changed pods by identity) counts nothing again
            twice = assemble(model, **args)
            assert all(a is b for a, b in zip(twice.snapshot.pods, again.snapshot.pods, strict=True))


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 40), st.text("ab\0/", max_size=3)), max_size=120))
def test_key_order_equals_a_full_sort(ops):
    order = KeyOrder(lambda item: item)
    store: dict[int, tuple[str, int]] = {}
    for put, key, name in ops:
        if put:
            store[key] = (name, key)
        else:
            store.pop(key, None)
        order.touch(key)
        if key % 3 == 0:  # read now and then, as cycles do
            assert order.keys(store) == [k for _, k in sorted((v, k) for k, v in store.items())]
    assert order.keys(store) == [k for _, k in sorted((v, k) for k, v in store.items())]


def test_unplaced_pods_are_this_schedulers_pending_pods_without_a_bind_in_flight():
    """Before a cycle the planner asks whether one could do anything: a pending pod of another scheduler (in a
    model built with other scheduler names than the SchedulerConfig's), a bound pod, and a pod whose bind is in
    flight, by its uid or by its name, are nothing to place."""
    base = {"pool": None, "group": None, "subgroup": None, "gpu": "none", "scheduler": SCHED, "node": None,
            "phase": "Pending", "priority": None, "skip": False, "owned": False}
    model = ShardModel()
    for i, fields in enumerate([base, {**base, "scheduler": "default-scheduler"}, {**base, "node": 1},
                                base, base]):
        entry = entry_of(pod(i, fields), now=NOW, class_names=[])
        model.put("pods", key_of(entry), entry)
    assert unplaced_pods(model) == 3  # p0, p3, p4
    assert unplaced_pods(model, inflight={"pod-0": ("n0", ()), "ns1/p4": ("n0", ())}) == 1
    assert unplaced_pods(model, inflight={"pod-0": ("n0", ()), "pod-3": ("n0", ()), "pod-4": ("n1", ())}) == 0
    config = {"apiVersion": "shoal.io/v1alpha1", "kind": "SchedulerConfig",
              "spec": {"schedulerNames": [SCHED, "default-scheduler"]}}
    assert unplaced_pods(model, config_doc=config) == 4

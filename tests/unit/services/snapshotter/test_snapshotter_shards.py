"""The typed, incremental snapshot equals the one built from raw objects, after any sequence of watch events.

Old path (still what `shoal simulate` does): the shard's raw objects (`shard_objects`) → `snapshot_from_objects`,
with decisions in flight overlaid on the manifests. New path: each event translated once into the snapshotter's
`Shards`, the pending Changes of every revision applied to a reader's ShardModel (as the planner does), then
`assemble`. Both must give the same core Snapshot, for every shard, at every step.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from services.snapshotter.translate import Shards
from shoal.core.ingest import snapshot_from_objects
from shoal.core.ingest.shard_model import ShardModel, assemble
from shoal.messages.snapshot import InFlightBind
from tests.unit.services.snapshotter.raw_snapshot import overlay_inflight, shard_objects, shard_of, trim

NOW = "2026-01-01T00:00:00Z"
SCHED = "shoal-scheduler"
POOLS = ("a", "b", None)
POOL = "kai.scheduler/node-pool"


def node(i: int, pool: str | None) -> dict:
    labels = {"nvidia.com/gpu.memory": "81920"}
    if pool:
        labels["kai.scheduler/node-pool"] = pool
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}", "uid": f"node-{i}", "labels": labels},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"}}}


def pod(i: int, draw_fields: dict) -> dict:
    f = draw_fields
    meta = {"name": f"p{i}", "namespace": f"ns{i % 3}", "uid": f"pod-{i}", "labels": {"kai.scheduler/queue": "q1"},
            "annotations": {}, "creationTimestamp": f"2025-12-0{1 + i % 9}T00:00:00Z"}
    if f["pool"]:
        meta["labels"]["kai.scheduler/node-pool"] = f["pool"]
    if f["group"] == "own":  # the podgrouper's name for a bare pod's PodGroup
        meta["annotations"]["pod-group-name"] = f"pg-p{i}-pod-{i}"
    elif f["group"] is not None:
        meta["annotations"]["pod-group-name"] = f"pg{f['group']}"
    if f["subgroup"]:
        meta["labels"]["kai.scheduler/subgroup-name"] = f["subgroup"]
    if f["skip"]:
        meta["annotations"]["kai.scheduler/skip-podgrouper"] = "true"
    if f.get("owned"):
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": f"job{i}", "uid": f"job-{i}",
                                    "controller": True}]
    resources: dict = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if f["gpu"] == "whole":
        resources["limits"] = {"nvidia.com/gpu": "1"}
    elif f["gpu"] == "fraction":
        meta["annotations"]["gpu-fraction"] = "0.5"
        if f["node"] is not None:
            meta["labels"]["runai-gpu-group"] = f"grp-{f['node']}"
    elif f["gpu"] == "bad":
        meta["annotations"]["gpu-fraction"] = "abc"
    spec: dict = {"schedulerName": f["scheduler"], "containers": [{"name": "c", "resources": resources}]}
    if f["node"] is not None:
        spec["nodeName"] = f"n{f['node']}"
    if f["priority"]:
        spec["priorityClassName"] = f["priority"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": f["phase"]}}


def podgroup(i: int, ns: int, pool: str | None, min_member: int) -> dict:
    labels = {"kai.scheduler/node-pool": pool} if pool else {}
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": f"pg{i}", "namespace": f"ns{ns}", "uid": f"pg-{ns}-{i}", "labels": labels,
                         "creationTimestamp": "2025-12-01T00:00:00Z"},
            "spec": {"minMember": min_member, "queue": "q1", "priorityClassName": "train"}}


QUEUE = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q1"},
         "spec": {"resources": {"gpu": {"quota": 8, "limit": -1}}}}
PRIORITY = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"},
            "value": 200}


def pdb(allowed: int) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep", "namespace": "ns1"},
            "spec": {"selector": {"matchLabels": {"kai.scheduler/queue": "q1"}}},
            "status": {"disruptionsAllowed": allowed}}


pod_fields = st.fixed_dictionaries({
    "pool": st.sampled_from(POOLS),
    "group": st.one_of(st.none(), st.integers(0, 5), st.just("own")),
    "subgroup": st.sampled_from([None, "workers"]),
    "gpu": st.sampled_from(["none", "whole", "fraction", "bad"]),
    "scheduler": st.sampled_from([SCHED, SCHED, "default-scheduler"]),
    "node": st.one_of(st.none(), st.none(), st.integers(0, 5)),
    "phase": st.sampled_from(["Pending", "Running", "Succeeded"]),
    "priority": st.sampled_from([None, "urgent", "train"]),
    "skip": st.sampled_from([False, False, True]),  # kai.scheduler/skip-podgrouper: its PodGroup is made elsewhere
    "owned": st.booleans(),  # a Job's pod (else bare: scheduled without waiting for the podgrouper's writes)
})

event = st.one_of(
    st.tuples(st.just("pod"), st.integers(0, 11), pod_fields),
    st.tuples(st.just("pod-gone"), st.integers(0, 11)),
    st.tuples(st.just("node"), st.integers(0, 5), st.sampled_from(POOLS)),
    st.tuples(st.just("node-gone"), st.integers(0, 5)),
    st.tuples(st.just("group"), st.integers(0, 5), st.integers(0, 2), st.sampled_from(POOLS), st.integers(1, 3)),
    st.tuples(st.just("group-gone"), st.integers(0, 5), st.integers(0, 2)),
    st.tuples(st.just("cluster"), st.sampled_from(["queue", "priority", "pdb0", "pdb1"]), st.booleans()),
)
events_of = st.lists(st.one_of(st.tuples(st.just("pod"), st.integers(0, 11), pod_fields), event), min_size=1,
                     max_size=40)


def _key(obj: dict) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def _old(objects: list[dict], shard: str, inflight: list[InFlightBind], require: bool, config: dict | None):
    # one difference on purpose: a pending pod goes to the shard of the PodGroup it names, as in KAI (its own
    # label put it elsewhere before, and the snapshot there gave it a minMember-1 group of its own)
    pools = {(o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"]["labels"].get(POOL)
             for o in objects if o["kind"] == "PodGroup"}
    moved = []
    for obj in objects:
        named = (obj["metadata"].get("annotations") or {}).get("pod-group-name")
        key = (obj["metadata"].get("namespace"), named)
        if obj["kind"] == "Pod" and not obj["spec"].get("nodeName") and named and key in pools:
            obj = copy.deepcopy(obj)
            obj["metadata"]["labels"].pop(POOL, None)
            if pools[key]:
                obj["metadata"]["labels"][POOL] = pools[key]
        moved.append(obj)
    originals = {_key(o): o for o in objects}
    objects = [o for o in moved if o["kind"] != "PodGroup" or shard_of(o) == shard]
    raw = [trim(originals[_key(o)]) for o in shard_objects(objects, shard, SCHED, require_podgroup=require)]
    return snapshot_from_objects(overlay_inflight(raw, inflight, 0.0), now=NOW, revision=7, config_doc=config)


@settings(max_examples=400, deadline=None)
@given(events=events_of, require=st.booleans(), picked=st.sets(st.integers(0, 11), max_size=6),
       config=st.sampled_from([None, {"apiVersion": "shoal.io/v1alpha1", "kind": "SchedulerConfig",
                                      "schedulerNames": [SCHED, "default-scheduler"]}]))
def test_incremental_typed_snapshot_equals_the_one_built_from_raw_objects(events, require, picked, config):
    objects: dict[tuple[str, str, str], dict] = {}
    shards = Shards(SCHED, raw_pods=lambda: [o for o in objects.values() if o["kind"] == "Pod"], now=lambda: NOW)
    readers: dict[str, ShardModel] = {}
    for ev in events:
        kind = ev[0]
        changed: list[dict] = []
        gone: list[dict] = []
        if kind == "pod":
            changed.append(pod(ev[1], ev[2]))
        elif kind == "pod-gone":
            gone += [o for o in objects.values() if o["kind"] == "Pod" and o["metadata"]["name"] == f"p{ev[1]}"]
        elif kind == "node":
            changed.append(node(ev[1], ev[2]))
        elif kind == "node-gone":
            gone += [o for o in objects.values() if o["kind"] == "Node" and o["metadata"]["name"] == f"n{ev[1]}"]
        elif kind == "group":
            changed.append(podgroup(ev[1], ev[2], ev[3], ev[4]))
        elif kind == "group-gone":
            gone += [o for o in objects.values() if _key(o) == ("PodGroup", f"ns{ev[2]}", f"pg{ev[1]}")]
        elif kind == "cluster":
            obj = {"queue": QUEUE, "priority": PRIORITY, "pdb0": pdb(0), "pdb1": pdb(1)}[ev[1]]
            (changed if ev[2] else gone).append(copy.deepcopy(obj))
        for obj in changed:
            objects[_key(obj)] = obj
            shards.update(copy.deepcopy(obj))
        for obj in gone:
            objects.pop(_key(obj), None)
            shards.remove(obj)
        for shard in shards.active():
            reader = readers.setdefault(shard, ShardModel())
            reader.apply(shards.take(shard))
            assert reader == ShardModel.of(shards.model(shard).entries())
            pending = [o for o in objects.values() if o["kind"] == "Pod" and not o["spec"].get("nodeName")]
            chosen = [o for o in sorted(pending, key=_key) if int(o["metadata"]["name"][1:]) in picked]
            inflight = [InFlightBind(pod=f"{o['metadata']['namespace']}/{o['metadata']['name']}",
                                     pod_uid=o["metadata"]["uid"], node="n0",
                                     gpu_groups=("g-new",) if "gpu-fraction" in o["metadata"]["annotations"] else (),
                                     plan_id="x", expires_at=1.0) for o in chosen]
            binds = {e.pod_uid: (e.node, e.gpu_groups) for e in inflight}
            new = assemble(reader, now=NOW, revision=7, config_doc=config, inflight=binds, require_podgroup=require)
            old = _old(list(objects.values()), shard, inflight, require, config)
            assert [p for p in old.problems if p.index == -1] == list(new.problems)
            assert new.snapshot == old.snapshot, shard

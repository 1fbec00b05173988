"""Shard membership of watched objects (pure): which shard's model keeps what, and what a pending pod needs."""

from services.snapshotter.translate import Shards
from shoal.core.ingest.shard_model import assemble

NOW = "2026-01-01T00:00:00Z"


def node(name, pool=None):
    labels = {"kai.scheduler/node-pool": pool} if pool else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels, "managedFields": [1]},
            "status": {"allocatable": {"nvidia.com/gpu": "2"}, "images": ["x"]}}


def pod(name, *, node=None, scheduler="shoal-scheduler", pool=None, phase="Pending", group=None, job=None):
    labels = {"kai.scheduler/node-pool": pool} if pool else {}
    annotations = {"pod-group-name": group} if group else {}
    spec = {"schedulerName": scheduler, "containers": [{"name": "c", "image": "busybox", "resources": {}}]}
    if node:
        spec["nodeName"] = node
    metadata = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels, "annotations": annotations}
    if job:
        metadata["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"uid-{job}",
                                        "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": spec, "status": {"phase": phase, "hostIP": "1.2.3.4"}}


def names(shards: Shards, shard: str) -> list[tuple[str, str]]:
    model = shards.model(shard)
    return sorted([("Node", n) for n in model.nodes] + [("Pod", e.pod.name) for e in model.pods.values()]
                  + [("Queue", q) for q in model.queues] + [("PodGroup", g) for g in model.pod_groups])


def fed(*objects) -> Shards:
    shards = Shards("shoal-scheduler", now=lambda: NOW)
    for obj in objects:
        assert shards.update(obj) is None
    return shards


def test_shards_split_by_node_pool_label():
    shards = fed(node("a1", "a"), node("b1", "b"), node("d1"), pod("pa", pool="a"), pod("pb", pool="b"), pod("pd"),
                 pod("other-sched-on-a", node="a1", scheduler="default-scheduler"),
                 pod("other-sched-pending", scheduler="default-scheduler"),
                 pod("done-on-a", node="a1", phase="Succeeded"),
                 {"kind": "Queue", "apiVersion": "scheduling.run.ai/v2", "metadata": {"name": "q"}, "spec": {}})
    assert shards.active() == ["a", "b", "default"]
    assert names(shards, "a") == [("Node", "a1"), ("Pod", "other-sched-on-a"), ("Pod", "pa"), ("Queue", "q")]
    assert names(shards, "default") == [("Node", "d1"), ("Pod", "pd"), ("Queue", "q")]


def test_a_bound_pod_follows_its_node_to_another_pool_and_a_finished_pod_leaves():
    shards = fed(node("n1", "a"), pod("p", node="n1"))
    assert ("Pod", "p") in names(shards, "a")
    shards.update(node("n1", "b"))
    assert names(shards, "a") == [] and names(shards, "b") == [("Node", "n1"), ("Pod", "p")]
    shards.update(pod("p", node="n1", phase="Succeeded"))
    assert names(shards, "b") == [("Node", "n1")]


def test_with_require_podgroup_a_pending_pod_waits_for_its_podgroup_unless_bare():
    """An owned pod waits for the PodGroup the podgrouper makes from its owners; a bare pod (no owner, no
    pod-group-name) is grouped by the pod alone, so it is scheduled at once in the PodGroup the podgrouper is
    making for it (same name, minMember 1), without waiting for the podgrouper's two writes."""
    shards = fed(node("a1", "a"), pod("grouped", pool="a", group="pg"), pod("named-missing", pool="a", group="later"),
                 pod("ungrouped", pool="a"), pod("bound-ungrouped", node="a1", pool="a"),
                 pod("job-pod", pool="a", job="train"),
                 # the podgrouper's annotation seen before its PodGroup (another watch): still counted
                 pod("annotated", pool="a", group="pg-annotated-uid-annotated"),
                 {"kind": "PodGroup", "apiVersion": "scheduling.run.ai/v2alpha2",
                  "metadata": {"name": "pg", "namespace": "ns", "labels": {"kai.scheduler/node-pool": "a"}}})
    waiting = assemble(shards.model("a"), now=NOW, require_podgroup=True).snapshot
    assert [p.name for p in waiting.pods] == ["annotated", "bound-ungrouped", "grouped", "ungrouped"]
    bare = next(p for p in waiting.pods if p.name == "ungrouped")
    group = next(g for g in waiting.pod_groups if g.name == bare.pod_group)
    assert bare.pod_group == "pg-ungrouped-uid-ungrouped" and group.min_member == 1
    annotated = next(p for p in waiting.pods if p.name == "annotated")
    assert any(g.name == annotated.pod_group == "pg-annotated-uid-annotated" for g in waiting.pod_groups)
    everything = assemble(shards.model("a"), now=NOW).snapshot
    assert [p.name for p in everything.pods] == ["annotated", "bound-ungrouped", "grouped", "job-pod",
                                                 "named-missing", "ungrouped"]


def test_a_broken_object_is_left_out_with_its_problem():
    shards = fed(node("a1", "a"), pod("p", pool="a"))
    bad = pod("p", pool="a")
    bad["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "half"}}
    problem = shards.update(bad)
    assert problem is not None and "nvidia.com/gpu" in problem
    assert names(shards, "a") == [("Node", "a1")]


def podgroup(name, pool=None):
    labels = {"kai.scheduler/node-pool": pool} if pool else {}
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels},
            "spec": {"minMember": 1, "queue": "q"}}


def test_a_pod_that_renames_its_podgroup_leaves_the_old_one():
    """A pod that named pg-a and now names pg-b, then finishes: moving pg-a to another pool later must not
    bring the finished pod back (hypothesis found the snapshotter raising KeyError here)."""
    shards = fed(node("a1", "a"), node("b1", "b"), podgroup("pg-a", "a"), podgroup("pg-b", "a"),
                 pod("p", group="pg-a"), pod("p", group="pg-b"))
    assert ("Pod", "p") in names(shards, "a")
    shards.update(pod("p", group="pg-b", phase="Succeeded"))
    assert shards.update(podgroup("pg-a", "b")) is None
    assert ("Pod", "p") not in names(shards, "a") + names(shards, "b")
    shards.update(podgroup("pg-b", "b"))
    assert ("Pod", "p") not in names(shards, "b")

"""Shard membership and trimming of snapshot objects (pure)."""

from services.snapshotter.translate import shard_objects, shards_of, trim


def node(name, pool=None):
    labels = {"kai.scheduler/node-pool": pool} if pool else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels, "managedFields": [1]},
            "status": {"allocatable": {"nvidia.com/gpu": "2"}, "images": ["x"]}}


def pod(name, *, node=None, scheduler="shoal-scheduler", pool=None, phase="Pending"):
    labels = {"kai.scheduler/node-pool": pool} if pool else {}
    spec = {"schedulerName": scheduler, "containers": [{"name": "c", "image": "busybox", "resources": {}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": spec, "status": {"phase": phase, "hostIP": "1.2.3.4"}}


def test_trim_keeps_what_the_core_reads_and_drops_the_rest():
    out = trim(pod("p", node="n1"))
    assert out["spec"]["containers"] == [{"name": "c", "resources": {}}]
    assert out["spec"]["nodeName"] == "n1"
    assert out["status"] == {"phase": "Pending"}
    assert "managedFields" not in trim(node("n1"))["metadata"]
    assert trim(node("n1"))["status"] == {"allocatable": {"nvidia.com/gpu": "2"}}


def test_shards_split_by_node_pool_label():
    objs = [node("a1", "a"), node("b1", "b"), node("d1"),
            pod("pa", pool="a"), pod("pb", pool="b"), pod("pd"),
            pod("other-sched-on-a", node="a1", scheduler="default-scheduler"),
            pod("other-sched-pending", scheduler="default-scheduler"),
            pod("done-on-a", node="a1", phase="Succeeded"),
            {"kind": "Queue", "apiVersion": "scheduling.run.ai/v2", "metadata": {"name": "q"}, "spec": {}}]
    assert shards_of(objs) == ["a", "b", "default"]
    names = [(o["kind"], o["metadata"]["name"]) for o in shard_objects(objs, "a", "shoal-scheduler")]
    assert names == [("Node", "a1"), ("Pod", "other-sched-on-a"), ("Pod", "pa"), ("Queue", "q")]
    default = [o["metadata"]["name"] for o in shard_objects(objs, "default", "shoal-scheduler")]
    assert default == ["d1", "pd", "q"]


def test_with_require_podgroup_a_pending_pod_waits_for_its_podgroup():
    grouped = pod("grouped", pool="a")
    grouped["metadata"]["annotations"] = {"pod-group-name": "pg"}
    named_missing = pod("named-missing", pool="a")
    named_missing["metadata"]["annotations"] = {"pod-group-name": "not-yet"}
    objs = [node("a1", "a"), grouped, named_missing, pod("ungrouped", pool="a"),
            pod("bound-ungrouped", node="a1", pool="a"),
            {"kind": "PodGroup", "apiVersion": "scheduling.run.ai/v2alpha2",
             "metadata": {"name": "pg", "namespace": "ns", "labels": {"kai.scheduler/node-pool": "a"}}}]
    names = [o["metadata"]["name"] for o in shard_objects(objs, "a", "shoal-scheduler", require_podgroup=True)]
    assert names == ["a1", "bound-ungrouped", "grouped", "pg"]
    everything = [o["metadata"]["name"] for o in shard_objects(objs, "a", "shoal-scheduler")]
    assert everything == ["a1", "bound-ungrouped", "grouped", "named-missing", "ungrouped", "pg"]

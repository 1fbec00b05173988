"""The watch cache's bookkeeping (the list+watch itself runs in the entry-point integration test)."""

from services.nodeagent.cache import ClusterCache
from services.nodeagent.config import NodeAgentSettings


def pod(uid, node, rv, ann=None):
    return {"metadata": {"uid": uid, "name": f"p-{uid}", "namespace": "ns", "resourceVersion": str(rv),
                         "annotations": ann or {}}, "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def test_queries_per_mode():
    one = ClusterCache(None, NodeAgentSettings(node_name="gpu-1"))
    assert one.pod_query == {"field_selector": "spec.nodeName=gpu-1"}
    assert one.node_query == {"field_selector": "metadata.name=gpu-1"}
    fake = ClusterCache(None, NodeAgentSettings(all_fake_nodes=True, backend="fake"))
    assert fake.node_query == {"label_selector": "shoal.io/fake-node=true"}
    assert fake.pod_query == {"field_selector": "spec.nodeName!="}


def test_index_by_node_and_newer_wins():
    cache = ClusterCache(None, NodeAgentSettings(node_name="n1"))
    cache.replace_pods([pod("a", "n1", 5), pod("b", "n2", 6)])
    assert [p.uid for p in cache.pods_on("n1")] == ["a"]
    cache.put_pod(pod("a", "n1", 9, {"k": "new"}))  # the agent's own patch (write-through)
    cache.put_pod(pod("a", "n1", 7, {"k": "old"}))  # a late watch event must not undo it
    assert cache.pods_on("n1")[0].annotations == {"k": "new"}
    cache.drop_pod(pod("a", "n1", 10))
    assert cache.pods_on("n1") == [] and [p.uid for p in cache.pods_on("n2")] == ["b"]
    assert not cache.ready
    cache.put_node({"metadata": {"name": "n1", "resourceVersion": "3", "labels": {"x": "1"}}})
    cache.put_node({"metadata": {"name": "n1", "resourceVersion": "2", "labels": {}}})
    assert cache.node_views()[0].labels == {"x": "1"}

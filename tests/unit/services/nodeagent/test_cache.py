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


async def test_a_reservation_pod_without_its_gpu_wakes_the_agent_for_its_node():
    cache = ClusterCache(None, NodeAgentSettings(all_fake_nodes=True, backend="fake"))
    cache.put_pod(pod("a", "n1", 1))  # an ordinary pod: nothing waits on it
    assert not cache.wake.is_set() and cache.waiting == set()
    reservation = pod("r", "n2", 2)
    reservation["metadata"]["namespace"] = cache.reservation_namespace
    cache.put_pod(reservation)  # a binder waits for its GPU: served before the next tick
    assert cache.wake.is_set() and cache.waiting == {"n2"}
    cache.wake.clear()
    cache.waiting.clear()
    done = pod("r", "n2", 3, {"run.ai/reserve_for_gpu_index": "GPU-1"})
    done["metadata"]["namespace"] = cache.reservation_namespace
    cache.put_pod(done)
    assert not cache.wake.is_set() and cache.waiting == set()

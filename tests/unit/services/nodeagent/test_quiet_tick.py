"""A fake node whose tick had nothing to do is not ticked again until its node, pods or GPU sample change."""

from kubernetes_asyncio import client

from services.nodeagent.app import NodeAgentApp, QuietTick
from services.nodeagent.binding import FAKE_DEVICES_ANNOTATION
from services.nodeagent.cache import ClusterCache
from services.nodeagent.config import NodeAgentSettings
from services.nodeagent.fake_backend import fake_gpu_uuid
from services.nodeagent.handlers import Annotate, TickResult
from services.nodeagent.inventory import InventorySample


def node(rv: int = 1) -> dict:
    return {"metadata": {"name": "n1", "resourceVersion": str(rv), "labels": {"shoal.io/fake-node": "true"}},
            "status": {"allocatable": {"nvidia.com/gpu": "2"}}}


def gpu_pod(rv: int, devices: str) -> dict:
    return {"metadata": {"uid": "u1", "name": "p1", "namespace": "ns", "resourceVersion": str(rv),
                         "annotations": {FAKE_DEVICES_ANNOTATION: devices}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}}


async def test_an_unchanged_quiet_node_reuses_its_tick_and_any_change_ticks_again():
    settings = NodeAgentSettings(all_fake_nodes=True, backend="fake", publish_telemetry=False)
    cache = ClusterCache(None, settings)
    cache.put_node(node())
    cache.put_pod(gpu_pod(1, fake_gpu_uuid("n1", 0)))  # its GPU already written: nothing to do
    api = client.ApiClient()
    try:
        app = NodeAgentApp(settings, api, cache=cache)
        [view] = cache.node_views()
        first = await app.tick_node(view, 1.0)
        assert not first.annotate and [g.holder for g in first.gpus] == ["ns/p1", ""]
        assert await app.tick_node(view, 2.0) is first  # same node, pods and sample: the same outcome
        cache.put_pod(gpu_pod(2, fake_gpu_uuid("n1", 1)))  # the pod changed: ticked again
        moved = await app.tick_node(view, 3.0)
        assert moved is not first and [g.holder for g in moved.gpus] == ["", "ns/p1"]
        cache.put_node(node(rv=2))  # a new NodeView (the node changed): ticked again
        [view] = cache.node_views()
        assert await app.tick_node(view, 4.0) is not moved
    finally:
        await api.close()


def test_a_tick_that_acted_or_polices_is_never_reused():
    idle = InventorySample(gpus=(), processes=())
    assert QuietTick.applies(TickResult(), idle)
    assert not QuietTick.applies(TickResult(annotate=[Annotate("ns", "p", "k", "v")]), idle)
    assert not QuietTick.applies(TickResult(), InventorySample(gpus=(), processes=(), partial=True))

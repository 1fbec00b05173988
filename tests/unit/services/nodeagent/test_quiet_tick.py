"""A fake node whose tick had nothing to do is not ticked again until its node, pods or GPU sample change; a
shared GPU without processes has nothing to police, one with processes is ticked every time."""

from kubernetes_asyncio import client

from services.nodeagent.app import SIMULATED_MEMORY, NodeAgentApp, QuietTick
from services.nodeagent.binding import FAKE_DEVICES_ANNOTATION, RESERVE_ANNOTATION
from services.nodeagent.cache import ClusterCache
from services.nodeagent.config import NodeAgentSettings
from services.nodeagent.fake_backend import fake_gpu_uuid
from services.nodeagent.handlers import Annotate, TickResult
from services.nodeagent.inventory import InventorySample
from shoal.core.kai_labels import FRACTION, GPU_GROUP_LABEL
from shoal.core.model import DEFAULT_RESERVATION_NAMESPACE


def node(rv: int = 1) -> dict:
    return {"metadata": {"name": "n1", "resourceVersion": str(rv), "labels": {"shoal.io/fake-node": "true"}},
            "status": {"allocatable": {"nvidia.com/gpu": "2"}}}


def gpu_pod(rv: int, devices: str) -> dict:
    return {"metadata": {"uid": "u1", "name": "p1", "namespace": "ns", "resourceVersion": str(rv),
                         "annotations": {FAKE_DEVICES_ANNOTATION: devices}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}}


def reservation(gpu: str) -> dict:
    return {"metadata": {"uid": "r1", "name": "res-g1", "namespace": DEFAULT_RESERVATION_NAMESPACE,
                         "resourceVersion": "1", "labels": {GPU_GROUP_LABEL: "g1"},
                         "annotations": {RESERVE_ANNOTATION: gpu}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}}


def fraction_pod(rv: int, annotations: dict[str, str] | None = None) -> dict:
    return {"metadata": {"uid": "f1", "name": "half", "namespace": "ns", "resourceVersion": str(rv),
                         "labels": {GPU_GROUP_LABEL: "g1"}, "annotations": {FRACTION: "0.5", **(annotations or {})}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}


async def test_a_shared_gpu_without_processes_is_quiet_and_one_with_a_process_is_policed_every_tick():
    settings = NodeAgentSettings(all_fake_nodes=True, backend="fake", publish_telemetry=False)
    cache = ClusterCache(None, settings)
    cache.put_node(node())
    cache.put_pod(reservation(fake_gpu_uuid("n1", 0)))
    cache.put_pod(fraction_pod(1))
    api = client.ApiClient()
    try:
        app = NodeAgentApp(settings, api, cache=cache)
        [view] = cache.node_views()
        first = await app.tick_node(view, 1.0)
        assert [(p.pod, p.memory_request_mib) for p in first.pods] == [("half", first.gpus[0].capacity_mib // 2)]
        settled = await app.tick_node(view, 2.0)  # the share is new to the policy state: ticked once more
        assert settled is not first and settled.pods == first.pods
        assert await app.tick_node(view, 3.0) is settled  # nothing to police, nothing changed: reused
        cache.put_pod(fraction_pod(2, {SIMULATED_MEMORY: "1000"}))  # a process on the shared GPU
        busy = [await app.tick_node(view, t) for t in (4.0, 5.0, 6.0, 7.0)]
        assert busy[-1].pods[0].memory_used_mib == 1000
        assert len({id(r) for r in busy}) == 4  # policed every tick
    finally:
        await api.close()


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
    assert QuietTick.applies(TickResult(), idle, timeless=True)
    assert not QuietTick.applies(TickResult(), idle, timeless=False)
    assert not QuietTick.applies(TickResult(annotate=[Annotate("ns", "p", "k", "v")]), idle, timeless=True)
    assert not QuietTick.applies(TickResult(), InventorySample(gpus=(), processes=(), partial=True), timeless=True)

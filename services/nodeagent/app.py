"""Wiring: the apiserver, the GPU inventory, Kafka and HTTP around `handlers.NodeAgent`.

Each tick (every `sample_period_s`) the agent lists the nodes it serves (its own node, or every node
matching the fake-node selector) and the pods on each (field selector `spec.nodeName`), samples the
node's GPUs, lets `NodeAgent.tick` decide, then acts (`effects`: pod annotation patches, Warning events,
process kills, ConfigMap writes); metrics are updated every tick and `GpuUsage` is published every
`telemetry_period_s`. Listing every tick keeps the agent stateless across restarts (the cluster is the
truth) at the cost of one list per node per tick.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.nodeagent.binding import RESERVE_ANNOTATION
from services.nodeagent.cache import ClusterCache
from services.nodeagent.config import NodeAgentSettings
from services.nodeagent.device_record import DeviceRecord
from services.nodeagent.effects import Effects, now_text
from services.nodeagent.fake_backend import FakeInventory, gpus_for_node
from services.nodeagent.handlers import (
    AgentConfig,
    NodeAgent,
    TickResult,
    is_reservation,
)
from services.nodeagent.inventory import GpuInventory
from services.nodeagent.procmap import ProcFs
from services.nodeagent.telemetry import GpuUsage, TelemetryCollector
from services.nodeagent.translate import NodeView, PodView, node_view, pod_view
from shoal.adapters.http import Readiness, background, build_app
from shoal.adapters.kafka import Publisher, ensure_topics
from shoal.adapters.kube import NODES, PODS, Kube, connect_kube
from shoal.errors import ShoalError
from shoal.logging import get_logger
from shoal.messages.base import new_meta
from shoal.messages.topics import GPU_USAGE
from shoal.metrics import Metrics

log = get_logger(__name__)
AGENT: web.AppKey[NodeAgentApp] = web.AppKey("nodeagent")
SIMULATED_MEMORY = "shoal.io/simulated-gpu-memory-mib"  # fake backend: a process using this much per GPU
SIMULATED_UTIL = "run.ai/simulated-gpu-utilization"  # fake-gpu-operator's "lo-hi" percent; the midpoint is used


def simulated_usage(pods: list[PodView], pod_gpus: dict[str, tuple[str, ...]]) -> dict[tuple[str, str], tuple[int, int]]:
    """Fake backend: the simulated GPU processes Running pods ask for by annotation (pure)."""
    wanted: dict[tuple[str, str], tuple[int, int]] = {}
    for pod in pods:
        text = pod.annotations.get(SIMULATED_MEMORY, "")
        if pod.phase != "Running" or pod.deleting or not text.strip().isdigit():
            continue
        util = 0
        lo, _, hi = pod.annotations.get(SIMULATED_UTIL, "").partition("-")
        if lo.strip().isdigit():
            util = min(100, (int(lo) + int(hi if hi.strip().isdigit() else lo)) // 2)
        for gpu in pod_gpus.get(pod.uid, ()):
            wanted[(pod.uid, gpu)] = (int(text), util)
    return wanted




@dataclass(frozen=True)
class QuietTick:
    """A fake node's tick that acted on nothing: no process, no write or event, and a policy state it left as
    it found it with no clock reading in it (`NodeAgent.timeless`: shared GPUs without processes qualify).
    Its outcome then depends only on the node, its pods and the GPU sample, so while the same NodeView, the
    same PodView objects (new ones are made for every changed pod) and an equal sample come back, the tick is
    not computed again: a backlog's hundreds of fake nodes tick every second."""

    node: NodeView
    pods: tuple[PodView, ...]
    sample: Any
    result: TickResult

    @staticmethod
    def applies(result: TickResult, sample: Any, timeless: bool) -> bool:
        return timeless and not (result.annotate or result.recorded or result.events or result.kills
                                 or result.configmaps or sample.processes or sample.partial)

    def same(self, node: NodeView, pods: list[PodView], sample: Any) -> bool:
        return node is self.node and len(pods) == len(self.pods) and \
            all(a is b for a, b in zip(pods, self.pods, strict=True)) and sample == self.sample


class NodeAgentApp(Effects):
    """The agent process: one `NodeAgent` and one inventory per node served."""

    def __init__(
        self,
        settings: NodeAgentSettings,
        api: client.ApiClient,
        *,
        publisher: Any | None = None,
        metrics: Metrics | None = None,
        inventories: dict[str, GpuInventory] | None = None,
        cache: ClusterCache | None = None,
    ) -> None:
        self.settings = settings
        self.cache = cache  # None: list nodes and pods each tick (tests drive ticks this way)
        self.kube = Kube(api, request_timeout_s=settings.kube.request_timeout_s)  # reads no cache serves, writes
        self.publisher = publisher
        self.metrics = metrics or Metrics()
        self.collector = TelemetryCollector()
        self.metrics.registry.register(self.collector)
        self.ticks = self.metrics.counter("nodeagent_ticks_total", "Node agent ticks.", ["outcome"])
        self.procfs = ProcFs(settings.proc_root)
        self.inventories: dict[str, GpuInventory] = dict(inventories or {})
        self.quiet: dict[str, QuietTick] = {}  # fake node → its last tick, while repeating it would change nothing
        self.fake_inputs: dict[str, tuple] = {}  # fake node → the labels and allocatable its GPUs were made from
        self.agents: dict[str, NodeAgent] = {}
        self.last_published: dict[str, float] = {}
        self.telemetry_sends: dict[str, asyncio.Task[None]] = {}  # node → its one outstanding send
        self.devices_seen: dict[str, tuple[str, ...]] = {}  # pod uid → GPUs (real mode)
        self.node_locks: dict[str, asyncio.Lock] = {}  # one tick of a node at a time (full tick, waiting)
        self.gate = asyncio.Semaphore(settings.parallel_nodes)
        self.ready = False
        self.device_record = DeviceRecord(settings.fake_device_dir)  # fake mode: the device plugin's
        self.config = AgentConfig(
            reservation_namespace=settings.reservation_namespace,
            may_choose_devices=settings.backend == "fake",
            annotate_devices=not self.device_record.on_disk,
            time_slicing=settings.time_slicing_mode,
            mps=settings.mps_mode,
            swap_reserved_mib=settings.swap_reserved_mib,
        )

    # ----- inputs -------------------------------------------------------------------------------------
    async def nodes(self) -> list[NodeView]:
        if self.cache is not None:
            return self.cache.node_views()
        if self.settings.all_fake_nodes:
            items, _ = await self.kube.list(NODES, label_selector=self.settings.fake_node_selector)
            return sorted((node_view(i) for i in items), key=lambda n: n.name)
        return [node_view(await self.kube.get(NODES, self.settings.node_name))]

    async def pods_on(self, node: str) -> list[PodView]:
        if self.cache is not None:
            return self.cache.pods_on(node)
        items, _ = await self.kube.list(PODS, field_selector=f"spec.nodeName={node}")
        return [pod_view(i) for i in items]

    def inventory(self, node: NodeView) -> GpuInventory:
        inv = self.inventories.get(node.name)
        if inv is None:
            if self.settings.backend == "fake":
                inv = FakeInventory.for_node(node.name, node.labels, node.allocatable)
            else:
                from services.nodeagent.nvml_backend import NvmlInventory

                inv = NvmlInventory(procfs=self.procfs)
            self.inventories[node.name] = inv
        elif isinstance(inv, FakeInventory) and self.fake_inputs.get(node.name) != (node.labels, node.allocatable):
            gpus = gpus_for_node(node.name, node.labels, node.allocatable)  # the node changed: its GPUs may have
            if gpus != inv.gpus:
                inv.set_gpus(gpus)
        if isinstance(inv, FakeInventory):
            self.fake_inputs[node.name] = (node.labels, node.allocatable)
        return inv

    def observed_devices(self, pods: list[PodView]) -> dict[str, tuple[str, ...]]:
        """Real mode: the GPUs the device plugin gave each GPU pod (NVIDIA_VISIBLE_DEVICES in its processes'
        environment; hostPID). Cached per pod uid: a container's devices never change."""
        wanted = [p for p in pods if p.active and (p.whole_gpus > 0 or (
            is_reservation(p, self.config.reservation_namespace) and RESERVE_ANNOTATION not in p.annotations))]
        missing = [p for p in wanted if p.uid not in self.devices_seen]
        if missing:
            by_pod = self.procfs.pids_by_pod()
            for pod in missing:
                devices = self.procfs.visible_devices_of_pod(pod.uid, by_pod.get(pod.uid, []))
                if devices:
                    self.devices_seen[pod.uid] = devices
        live = {p.uid for p in pods}
        for uid in [u for u in self.devices_seen if u not in live]:
            del self.devices_seen[uid]
        return {p.key: self.devices_seen[p.uid] for p in wanted if p.uid in self.devices_seen}

    # ----- one tick ------------------------------------------------------------------------------------
    async def tick(self, now: float) -> None:
        nodes = await self.nodes()
        await asyncio.gather(*(self._tick_quietly(node, now) for node in nodes))
        served = {n.name for n in nodes}
        for gone in [n for n in self.agents if n not in served]:
            self.agents.pop(gone)
            self.collector.forget(gone)
            inv = self.inventories.pop(gone, None)
            self.fake_inputs.pop(gone, None)
            self.quiet.pop(gone, None)
            self.device_record.forget(gone)
            if inv is not None:
                inv.close()
        self.ready = True

    async def _tick_quietly(self, node: NodeView, now: float, *, gated: bool = True) -> None:
        """One node's tick; a failing node is logged and the others go on. Full ticks take `parallel_nodes`
        at once (one process may serve many fake nodes); a node whose reservation pod waits is not queued
        behind them (`gated=False`)."""
        async with self.gate if gated else contextlib.nullcontext():
            try:
                await self.tick_node(node, now)
                self.ticks.labels(outcome="ok").inc()
            except (TimeoutError, ApiException, OSError, ShoalError) as exc:
                self.ticks.labels(outcome="error").inc()
                log.warning("node_tick_failed", node=node.name, error=str(exc))

    async def tick_node(self, node: NodeView, now: float) -> TickResult:
        async with self.node_locks.setdefault(node.name, asyncio.Lock()):
            return await self._tick_node(node, now)

    async def _tick_node(self, node: NodeView, now: float) -> TickResult:
        inv = self.inventory(node)
        pods = await self.pods_on(node.name)
        sample = inv.sample() if isinstance(inv, FakeInventory) else await asyncio.to_thread(inv.sample)
        agent = self.agents.setdefault(node.name, NodeAgent(node.name, self.config))
        refs = {}
        observed: dict[str, tuple[str, ...]] = {}
        if self.settings.backend == "nvml":
            for proc in sample.processes:
                ref = self.procfs.container_of(proc.pid)
                if ref is not None:
                    refs[proc.pid] = ref
            observed = self.observed_devices(pods)
        pool = node.labels.get(self.settings.node_pool_label, "")
        telemetry_due = self.publisher is not None and \
            now - self.last_published.get(node.name, -1e18) >= self.settings.telemetry_period_s
        quiet = self.quiet.get(node.name)
        if quiet is not None and not telemetry_due and quiet.same(node, pods, sample):
            return quiet.result  # nothing the tick reads changed, and it had nothing to do: the same outcome
        fake = self.config.may_choose_devices
        state, plan_no = agent.state, agent.plan_no
        result = agent.tick(node, pods, sample, now, policy=self.settings.policy_for(pool),
                            sharing_mode=self.settings.mode_for(pool), refs=refs, observed=observed,
                            recorded=self.device_record.of(node.name) if fake else None)
        if fake:  # before the writes: a crash after them must find what they announced
            self.device_record.update(node.name, result.recorded,
                                      live=(p.uid for p in pods if p.active and p.whole_gpus > 0))
        await self.act(node, inv, agent, result, pods)
        if isinstance(inv, FakeInventory):
            inv.sync_simulated(simulated_usage(pods, result.pod_gpus))
        usage = GpuUsage(
            meta=new_meta("nodeagent"), node=node.name, node_pool=pool, sampled_at=now_text(),
            partial=sample.partial, gpus=result.gpus, pods=result.pods,
        )
        self.collector.update(usage)
        if telemetry_due:
            self.last_published[node.name] = now
            self.send_telemetry(node.name, usage)
        self.quiet.pop(node.name, None)
        if isinstance(inv, FakeInventory) and QuietTick.applies(result, sample, agent.timeless(state, plan_no)):
            self.quiet[node.name] = QuietTick(node, tuple(pods), sample, result)
        return result

    def send_telemetry(self, node: str, usage: GpuUsage) -> None:
        """Publish in the background: while Kafka is unreachable a send waits, and the tick (reservation
        pods' GPUs, policing) must not wait with it. One send per node at a time; samples taken meanwhile
        are dropped (telemetry is best effort, the next period publishes again)."""
        pending = self.telemetry_sends.get(node)
        if pending is not None and not pending.done():
            log.warning("telemetry_publish_skipped", node=node, reason="previous send still waiting")
            return
        self.telemetry_sends[node] = asyncio.create_task(self._send(node, usage), name=f"telemetry:{node}")

    async def _send(self, node: str, usage: GpuUsage) -> None:
        assert self.publisher is not None
        try:
            await self.publisher.publish(GPU_USAGE.full(self.settings.topic_prefix), usage, key=node)
        except ShoalError as exc:
            log.warning("telemetry_publish_failed", node=node, error=str(exc))

    # ----- loop and HTTP -------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """A full tick every `sample_period_s`; meanwhile, even during a full tick, a node that got a
        reservation pod without its GPU is served at once (a binder waits on it), so shared-GPU binds wait
        neither for the next tick nor for the other nodes' annotations in a burst."""
        loop = asyncio.get_running_loop()
        serving = asyncio.create_task(self._serve_waiting_forever()) if self.cache is not None else None
        try:
            while not stop.is_set():
                started = loop.time()
                try:
                    await self.tick(started)
                except (TimeoutError, ApiException, OSError, ShoalError) as exc:
                    self.ticks.labels(outcome="error").inc()
                    log.warning("tick_failed", error=str(exc))
                left = self.settings.sample_period_s - (loop.time() - started)
                if left > 0:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(stop.wait(), left)
        finally:
            if serving is not None:
                serving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await serving

    async def _serve_waiting_forever(self) -> None:
        assert self.cache is not None
        loop = asyncio.get_running_loop()
        while True:
            await self.cache.wake.wait()
            try:
                await self.serve_waiting(loop.time())
            except (TimeoutError, ApiException, OSError, ShoalError) as exc:
                log.warning("serve_waiting_failed", error=str(exc))

    async def serve_waiting(self, now: float) -> None:
        """Tick the nodes whose reservation pods wait for a GPU (see `ClusterCache.waiting`)."""
        assert self.cache is not None
        self.cache.wake.clear()
        names, self.cache.waiting = self.cache.waiting, set()
        await asyncio.gather(*(self._tick_quietly(node, now, gated=False)
                               for node in await self.nodes() if node.name in names))

    def close(self) -> None:
        for task in self.telemetry_sends.values():
            task.cancel()
        for inv in self.inventories.values():
            inv.close()


def build(settings: NodeAgentSettings) -> web.Application:
    """The service: /healthz, /readyz (ready after the first tick), /metrics, and the tick loop in the background.

    Cleanup contexts, in order: the kube client, the Kafka publisher (best effort: without Kafka the agent
    still polices and serves metrics), the agent loop.
    """
    metrics, readiness = Metrics(), Readiness()
    app = build_app(metrics=metrics, readiness=readiness)

    async def agent_ctx(app: web.Application) -> AsyncIterator[None]:
        api = await connect_kube(settings.kube, component="nodeagent")
        publisher = None
        if settings.publish_telemetry:
            topic = GPU_USAGE.full(settings.topic_prefix)
            candidate = Publisher(settings.kafka)
            try:
                await ensure_topics(settings.kafka, [topic], partitions=GPU_USAGE.partitions)
                await candidate.start()
                publisher = candidate
            except ShoalError as exc:
                log.error("telemetry_disabled", error=str(exc))
        cache = ClusterCache(Kube(api, request_timeout_s=settings.kube.request_timeout_s), settings)
        agent = NodeAgentApp(settings, api, publisher=publisher, metrics=metrics, cache=cache)
        readiness.add("first_tick", lambda: agent.ready)
        app[AGENT] = agent
        try:
            yield
        finally:
            agent.close()
            if publisher is not None:
                with contextlib.suppress(Exception):
                    await publisher.stop()
            await api.close()

    async def watch(app: web.Application) -> None:
        cache = app[AGENT].cache
        assert cache is not None  # the service's agent always has its cache (tests may drive one without)
        await cache.run()

    async def loop(app: web.Application) -> None:
        agent = app[AGENT]
        assert agent.cache is not None
        await agent.cache.wait_synced()
        await agent.run(asyncio.Event())

    app.cleanup_ctx.append(agent_ctx)
    app.cleanup_ctx.append(background("nodeagent_watch", watch))
    app.cleanup_ctx.append(background("nodeagent_loop", loop))
    return app

"""What the node agent does to the cluster and the node after a tick decided: pod annotation patches (written
through to the cache), Warning events as the kubelet's would read, process kills, ConfigMap writes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from services.nodeagent.cache import ClusterCache
from services.nodeagent.handlers import Annotate, NodeAgent, PodEvent, TickResult, WriteConfigMap
from services.nodeagent.inventory import GpuInventory, NoSuchProcess
from services.nodeagent.memory_policy import Kill
from services.nodeagent.telemetry import TelemetryCollector
from services.nodeagent.translate import NodeView, PodView
from shoal.adapters.kube import CONFIGMAPS, CORE_EVENTS, PODS, Kube
from shoal.errors import NotFoundError, ShoalError
from shoal.logging import get_logger

log = get_logger("services.nodeagent.app")
COMPONENT = "shoal-nodeagent"

def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Effects:
    """Mixed into `NodeAgentApp`, whose fields these are."""

    kube: Kube
    cache: ClusterCache | None
    collector: TelemetryCollector

    async def act(self, node: NodeView, inv: GpuInventory, agent: NodeAgent, result: TickResult,
                  pods: list[PodView]) -> None:
        for note in result.notes:
            log.info("node_note", node=node.name, note=note)
        await asyncio.gather(*(self.annotate(node.name, a) for a in result.annotate))  # different pods
        for event in result.events:
            self.collector.count(node.name, "report", event.reason)
            await self.event(node.name, event)
        by_key = {p.key: p for p in pods}
        for kill in result.kills:
            await self.kill(node.name, inv, kill, by_key.get(kill.pod_key))
        for cm in result.configmaps:
            await self.write_configmap(cm)
            agent.configmap_written(cm)

    async def annotate(self, node: str, a: Annotate) -> None:
        patched = await self.kube.patch(PODS, a.name, {"metadata": {"annotations": {a.key: a.value}}},
                                        namespace=a.namespace)
        if self.cache is not None:
            self.cache.put_pod(patched)  # write-through: the next tick sees it
        log.info("gpu_assigned", node=node, pod=f"{a.namespace}/{a.name}", annotation=a.key, gpu=a.value)

    async def kill(self, node: str, inv: GpuInventory, kill: Kill, pod: PodView | None) -> None:
        fields = {"node": node, "pod": kill.pod_key, "pid": kill.pid, "gpu": kill.gpu_uuid, "reason": kill.reason}
        try:
            inv.kill(kill.pid, kill.start_ticks)
        except NoSuchProcess as exc:
            log.info("kill_skipped", **fields, why=str(exc))
            return
        except PermissionError as exc:
            log.error("kill_failed", **fields, error=str(exc))
            if pod is not None:
                await self.event(node, PodEvent(pod.namespace, pod.name, pod.uid, "GPUProcessKillFailed",
                                                f"could not kill process {kill.pid}: {exc}"))
            return
        self.collector.count(node, "kill", kill.reason)
        log.warning("gpu_process_killed", **fields)
        if pod is not None:
            await self.event(node, PodEvent(pod.namespace, pod.name, pod.uid, kill.reason, kill.message))

    async def event(self, node: str, event: PodEvent) -> None:
        now = now_text()
        body = {
            "metadata": {"generateName": f"{event.name}.", "namespace": event.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": event.namespace,
                               "name": event.name, "uid": event.uid},
            "reason": event.reason, "message": event.message, "type": event.type,
            "source": {"component": COMPONENT, "host": node},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": COMPONENT, "reportingInstance": node,
        }
        try:
            await self.kube.create(CORE_EVENTS, body, namespace=event.namespace, answer=False)
        except ShoalError as exc:
            log.warning("event_failed", pod=f"{event.namespace}/{event.name}", reason=event.reason,
                        status=exc.status, error=str(exc))

    async def write_configmap(self, cm: WriteConfigMap) -> None:
        try:
            await self.kube.patch(CONFIGMAPS, cm.name, {"data": cm.data}, namespace=cm.namespace, answer=False)
        except NotFoundError:
            body = {"metadata": {"name": cm.name, "namespace": cm.namespace, "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": cm.owner_pod, "uid": cm.owner_uid}]}, "data": cm.data}
            await self.kube.create(CONFIGMAPS, body, namespace=cm.namespace, answer=False)

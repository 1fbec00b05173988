"""The apiserver's ceiling for a KAI-compatible scheduler (`shoal bench e2e`'s `kai-writes` phase).

Nobody schedules: the benchmark makes, for each pod of the mix, the writes KAI's model asks of whatever binds it
(those Shoal's podgrouper, binder and node agent make), 64 pods in flight. So the figure is what this apiserver
allows a scheduler that keeps KAI users' manifests working, beside `apiserver-bind` (bindings alone) and the
kube-scheduler contenders (a binding and an event per pod). Per pod, in order:

- a bare pod (whole GPU or fraction): its own PodGroup, owned by the pod (the podgrouper's);
- a fraction: the reservation pod of its shared GPU (one per two halves; made by the first, then given its GPU
  id by a patch, as the node agent does), the two GPU ConfigMaps and a patch of the pod's labels and
  annotations (the binder's);
- every pod: its binding and a Scheduled event; a gang's last member, the start stamp on the gang's PodGroup.

    writes = pod_writes(plan, "ns", node="n1", uid="…", gpu_group=None)   # pure: [(verb, resource, …)]
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from shoal.adapters import kube as k
from shoal.core.kai_labels import (
    GPU_GROUP_LABEL,
    GPU_SHARED_LABEL,
    RECEIVED_TYPE,
    RESERVE_GPU_ANNOTATION,
    gpu_group_labels,
)
from shoal.core.model import ANNOTATION_LAST_START, DEFAULT_RESERVATION_NAMESPACE
from shoal.devstack.bench_pods import PodPlan, binding, podgroup_manifest

STAMP = "2026-01-01T00:00:00Z"


@dataclass(frozen=True)
class Write:
    verb: str  # "create" or "patch"
    resource: k.Resource
    namespace: str
    name: str
    body: dict
    subresource: str | None = None


def _owned_by(pod: str, uid: str) -> dict:
    return {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}]}


def reservation_writes(node: str, group: str) -> list[Write]:
    """A shared GPU's reservation pod, then its GPU id."""
    ns, name = DEFAULT_RESERVATION_NAMESPACE, f"{group}-{node}"[:63]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, "labels": {"app": "kai-resource-reservation",
                                                                  GPU_GROUP_LABEL: group}},
           "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [
               {"name": "reservation", "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    return [Write("create", k.PODS, ns, name, pod),
            Write("patch", k.PODS, ns, name, {"metadata": {"annotations": {RESERVE_GPU_ANNOTATION: f"GPU-{group}"}}})]


def pod_writes(plan: PodPlan, namespace: str, *, node: str, uid: str, gpu_group: str | None) -> list[Write]:
    """The writes for one pod after its shared GPU's reservation (pure)."""
    out: list[Write] = []
    if plan.group is None:
        group = podgroup_manifest(namespace, f"pg-{plan.name}", 1, namespace)
        group["metadata"].update(_owned_by(plan.name, uid))
        out.append(Write("create", k.PODGROUPS, namespace, group["metadata"]["name"], group))
    if gpu_group is not None:
        for suffix, data in (("shared-gpu-0", {"NVIDIA_VISIBLE_DEVICES": f"GPU-{gpu_group}", "GPU_PORTION": "0.5",
                                               "RUNAI_NUM_OF_GPUS": "0.5"}), ("shared-gpu-0-evar", {})):
            name = f"{plan.name}-{suffix}"
            out.append(Write("create", k.CONFIGMAPS, namespace, name, {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, **_owned_by(plan.name, uid)}, "data": data}))
        out.append(Write("patch", k.PODS, namespace, plan.name, {"metadata": {
            "labels": {**gpu_group_labels((gpu_group,)), GPU_SHARED_LABEL: "true"},
            "annotations": {RECEIVED_TYPE: "Fraction"}}}))
    out.append(Write("create", k.PODS, namespace, plan.name, binding(namespace, plan.name, node), "binding"))
    out.append(Write("create", k.CORE_EVENTS, namespace, f"{plan.name}.scheduled", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{plan.name}.scheduled", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": plan.name, "namespace": namespace, "uid": uid},
        "reason": "Scheduled", "message": f"Successfully assigned pod {namespace}/{plan.name} to node {node}",
        "type": "Normal", "source": {"component": "bench"}, "firstTimestamp": STAMP, "lastTimestamp": STAMP,
        "count": 1}))
    return out


def stamp_write(namespace: str, group: str) -> Write:
    return Write("patch", k.PODGROUPS, namespace, group, {"metadata": {"annotations": {ANNOTATION_LAST_START: STAMP}}})


async def send(kube: k.Kube, write: Write) -> None:
    if write.verb == "create":
        await kube.create(write.resource, write.body, namespace=write.namespace,
                          name=write.name if write.subresource else None, subresource=write.subresource,
                          answer=False)
    else:
        await kube.patch(write.resource, write.name, write.body, namespace=write.namespace, answer=False)


@dataclass
class KaiWriter:
    """Makes every pod's writes, the reservation of each shared GPU once, the gangs' stamps after their last
    member; `posted`: seconds from each pod's first write to its binding's answer."""

    kube: k.Kube
    namespace: str
    nodes: list[str]
    uids: dict[str, str]
    posted: list[float]

    def __post_init__(self) -> None:
        self._reserved: dict[str, asyncio.Future] = {}
        self._left: dict[str, int] = {}

    def jobs(self, plans: list[PodPlan]) -> list[Callable[[], Awaitable[None]]]:
        fractions = 0
        out = []
        for i, plan in enumerate(plans):
            gpu_group = None
            node = self.nodes[i % len(self.nodes)]
            if plan.kind == "fraction":
                gpu_group = f"{self.namespace}-gpu{fractions // 2}"
                node = self.nodes[(fractions // 2) % len(self.nodes)]  # both halves on their GPU's node
                fractions += 1
            if plan.group is not None:
                self._left[plan.group] = self._left.get(plan.group, 0) + 1
            out.append(self._job(plan, node, gpu_group))
        return out

    def _job(self, plan: PodPlan, node: str, gpu_group: str | None) -> Callable[[], Awaitable[None]]:
        async def one() -> None:
            started = time.monotonic()
            if gpu_group is not None:
                made = self._reserved.get(gpu_group)
                if made is None:
                    made = self._reserved[gpu_group] = asyncio.ensure_future(self._reserve(node, gpu_group))
                await asyncio.shield(made)
            for write in pod_writes(plan, self.namespace, node=node, uid=self.uids[plan.name], gpu_group=gpu_group):
                await send(self.kube, write)
                if write.subresource == "binding":
                    self.posted.append(time.monotonic() - started)
            if plan.group is not None:
                self._left[plan.group] -= 1
                if self._left[plan.group] == 0:
                    await send(self.kube, stamp_write(self.namespace, plan.group))

        return one

    async def _reserve(self, node: str, group: str) -> None:
        for write in reservation_writes(node, group):
            await send(self.kube, write)

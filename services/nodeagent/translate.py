"""Kubernetes JSON (dicts as the API returns them) → the agent's small pod/node views (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.nodeagent.procmap import bare_container_id
from shoal.core.ingest import gpu_env

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class PodView:
    uid: str
    namespace: str
    name: str
    node_name: str
    phase: str
    created: str  # RFC3339, sortable as text
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    whole_gpus: int = 0  # nvidia.com/gpu requested by the pod's containers
    container_ids: tuple[str, ...] = ()
    priority: int = 0
    deleting: bool = False
    fraction_container: str = "0"  # KAI's ConfigMap index of the GPU container: "<idx>" or "i<idx>" (init)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def active(self) -> bool:
        return self.phase in ("Pending", "Running") and not self.deleting


@dataclass(frozen=True)
class NodeView:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)


def _gpu_count(value: Any) -> int:
    try:
        return max(0, int(str(value)))
    except (TypeError, ValueError):
        return 0


def pod_view(obj: Mapping[str, Any]) -> PodView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    whole = 0
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = resources.get("requests") or {}
        whole += _gpu_count(limits.get(GPU_RESOURCE, requests.get(GPU_RESOURCE, 0)))
    ids = tuple(
        bare_container_id(s["containerID"])
        for s in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
        if s.get("containerID")
    )
    created = meta.get("creationTimestamp") or ""
    if not isinstance(created, str):
        created = created.isoformat()
    return PodView(
        uid=meta.get("uid") or "",
        namespace=meta.get("namespace") or "",
        name=meta.get("name") or "",
        node_name=spec.get("nodeName") or "",
        phase=status.get("phase") or "Pending",
        created=created,
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        whole_gpus=whole,
        container_ids=ids,
        priority=int(spec.get("priority") or 0),
        deleting=bool(meta.get("deletionTimestamp")),
        fraction_container=gpu_env.container_suffix(obj),
    )


def node_view(obj: Mapping[str, Any]) -> NodeView:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return NodeView(
        name=meta.get("name") or "",
        labels=dict(meta.get("labels") or {}),
        allocatable={k: str(v) for k, v in (status.get("allocatable") or {}).items()},
    )

"""Node manifests → model.Node."""

from __future__ import annotations

from collections.abc import Mapping

from shoal.core.ingest.common import IngestError, as_list, as_map, metadata, name_of, str_map
from shoal.core.ingest.quantity import QuantityError, milli, whole
from shoal.core.kai_labels import NODE_POOL_LABEL
from shoal.core.model import LABEL_GPU_MEMORY, Node, Taint

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"


def _quantity(resources: Mapping, key: str, field: str, convert, default: int) -> int:
    if key not in resources:
        return default
    try:
        value = convert(resources[key])
    except QuantityError as exc:
        raise IngestError(f"{field}.{key}", str(exc)) from None
    if value < 0:
        raise IngestError(f"{field}.{key}", "must not be negative")
    return value


def node_from(obj: Mapping) -> Node:
    name = name_of(obj)
    meta = metadata(obj)
    labels = str_map(meta.get("labels"), "metadata.labels")
    spec = as_map(obj.get("spec"), "spec")
    status = as_map(obj.get("status"), "status")
    allocatable = as_map(status.get("allocatable"), "status.allocatable")
    field = "status.allocatable"
    if not allocatable:
        allocatable = as_map(status.get("capacity"), "status.capacity")
        field = "status.capacity"
    taints = []
    for i, raw in enumerate(as_list(spec.get("taints"), "spec.taints")):
        taint = as_map(raw, f"spec.taints[{i}]")
        if not taint.get("key"):
            raise IngestError(f"spec.taints[{i}].key", "is required")
        taints.append(Taint(key=str(taint["key"]), value=str(taint.get("value") or ""),
                            effect=str(taint.get("effect") or "NoSchedule")))
    ready = True
    for i, raw in enumerate(as_list(status.get("conditions"), "status.conditions")):
        cond = as_map(raw, f"status.conditions[{i}]")
        if cond.get("type") == "Ready":
            ready = str(cond.get("status")) == "True"
    gpu_memory = None
    if labels.get(LABEL_GPU_MEMORY):
        try:
            gpu_memory = whole(labels[LABEL_GPU_MEMORY])
        except QuantityError as exc:
            raise IngestError(f"metadata.labels.{LABEL_GPU_MEMORY}", str(exc)) from None
    mig = any(str(k).startswith(MIG_PREFIX) for k in allocatable) or labels.get(
        "nvidia.com/mig.strategy", "") in ("single", "mixed") and "nvidia.com/mig.config" in labels
    return Node(
        name=name,
        pool=labels.get(NODE_POOL_LABEL, ""),
        labels=labels,
        taints=tuple(sorted(taints, key=lambda t: (t.key, t.value, t.effect))),
        cpu_milli=_quantity(allocatable, "cpu", field, milli, 0),
        memory_bytes=_quantity(allocatable, "memory", field, whole, 0),
        pods=_quantity(allocatable, "pods", field, whole, 110),
        gpus=_quantity(allocatable, GPU_RESOURCE, field, whole, 0),
        gpu_memory_mib=gpu_memory,
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        mig_enabled=bool(mig),
    )

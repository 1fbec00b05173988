"""Queue (scheduling.run.ai/v2) and PriorityClass manifests → model objects.

Queue units: gpu devices (fractions allowed) → milli-GPU; cpu millicores → millicores;
memory MEGABYTES (10^6 bytes) → bytes. -1 stays -1 (unlimited).
An omitted `limit` is kept as None: limit = quota (SPEC §2.1). An omitted whole resource
section is {quota 0, limit = quota (0), overQuotaWeight 0} (reference §2.1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

from shoal.core.ingest.common import IngestError, as_map, name_of, norm_time, parse_duration
from shoal.core.ingest.quantity import QuantityError, parse_number
from shoal.core.model import DEFAULT_QUEUE_PRIORITY, UNLIMITED, PriorityClass, Queue, QueueResource

# (resource, multiplier from the CRD unit to the model unit)
QUEUE_UNITS = (("gpu", 1000), ("cpu", 1), ("memory", 10**6))

# Shoal ships these (SPEC §1); they exist even when the input has none; input classes override by name.
SHIPPED_PRIORITY_CLASSES = (
    PriorityClass(name="train", value=50),
    PriorityClass(name="build-preemptible", value=75),
    PriorityClass(name="build", value=100),
    PriorityClass(name="inference", value=125),
)


def _amount(value: object, field: str, scale: int) -> int:
    try:
        number = parse_number(value)
    except QuantityError as exc:
        raise IngestError(field, str(exc)) from None
    if number == -1:
        return UNLIMITED
    if number < 0:
        raise IngestError(field, f"must be -1 (unlimited) or >= 0, got {value}")
    return math.ceil(number * scale)


def _resource(section: object, field: str, scale: int) -> QueueResource:
    if section is None:
        return QueueResource(quota=0, limit=None, weight=0.0)
    data = as_map(section, field)
    quota = _amount(data["quota"], f"{field}.quota", scale) if data.get("quota") is not None else 0
    limit = _amount(data["limit"], f"{field}.limit", scale) if data.get("limit") is not None else None
    weight = 0.0
    if data.get("overQuotaWeight") is not None:
        try:
            weight_value = parse_number(data["overQuotaWeight"])
        except QuantityError as exc:
            raise IngestError(f"{field}.overQuotaWeight", str(exc)) from None
        if weight_value < 0:
            raise IngestError(f"{field}.overQuotaWeight", "must not be negative")
        weight = float(Fraction(weight_value))
    return QueueResource(quota=quota, limit=limit, weight=weight)


def queue_from(obj: Mapping) -> Queue:
    name = name_of(obj)
    meta = as_map(obj.get("metadata"), "metadata")
    spec = as_map(obj.get("spec"), "spec")
    resources = as_map(spec.get("resources"), "spec.resources")
    parts = {key: _resource(resources.get(key), f"spec.resources.{key}", scale) for key, scale in QUEUE_UNITS}
    priority = spec.get("priority", DEFAULT_QUEUE_PRIORITY)
    if priority is None:
        priority = DEFAULT_QUEUE_PRIORITY
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise IngestError("spec.priority", "must be an integer")
    parent = spec.get("parentQueue") or None
    if parent is not None and str(parent) == name:
        raise IngestError("spec.parentQueue", "a queue cannot be its own parent")
    created = meta.get("creationTimestamp")
    return Queue(
        name=name,
        parent=str(parent) if parent else None,
        display_name=str(spec.get("displayName") or ""),
        priority=priority,
        created=norm_time(created, "metadata.creationTimestamp") if created else "",
        gpu=parts["gpu"],
        cpu=parts["cpu"],
        memory=parts["memory"],
        preempt_min_runtime_s=(parse_duration(spec["preemptMinRuntime"], "spec.preemptMinRuntime")
                               if spec.get("preemptMinRuntime") is not None else None),
        reclaim_min_runtime_s=(parse_duration(spec["reclaimMinRuntime"], "spec.reclaimMinRuntime")
                               if spec.get("reclaimMinRuntime") is not None else None),
    )


def priority_class_from(obj: Mapping) -> PriorityClass:
    name = name_of(obj)
    value = obj.get("value")
    if isinstance(value, bool) or not isinstance(value, int):
        raise IngestError("value", "is required and must be an integer")
    return PriorityClass(name=name, value=value, global_default=bool(obj.get("globalDefault")))

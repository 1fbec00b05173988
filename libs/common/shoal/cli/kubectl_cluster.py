"""What `kubectl shoal` reads from the cluster itself when the api service does not answer: Queues (spec and the
status the binder writes), pods, nodes and Shoal's events. The figures have the api's shapes, so one renderer
serves both sources.

    figures = queue_figures(queue_obj, gpus_in_use)   # {"gpu"|"cpu"|"memory": {deserved, fairShare, ...}}
    rows = node_rows(nodes, pods)                     # per-node GPU use, as `kubectl shoal top nodes`
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shoal.core.kai_labels import FRACTION, NODE_POOL_LABEL, QUEUE_LABELS
from shoal.core.model import DEFAULT_RESERVATION_NAMESPACE

GPU = "nvidia.com/gpu"
RESERVATION_NAMESPACE = DEFAULT_RESERVATION_NAMESPACE  # the binder's and node agent's default
SHOAL_COMPONENT = "shoal-scheduler"  # the binder's events (source / reportingComponent)
NO_SHARD = "-"  # Queue status carries no shard: the binder writes the latest plan's figures


def quantity(value: Any, resource: str) -> float:
    """A Kubernetes quantity in display units: GPUs, CPU cores, memory bytes ("-1" stays -1)."""
    text = str(value if value is not None else "0").strip()
    if text == "-1":
        return -1
    suffixes = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
                "Ti": 2**40}
    for suffix in sorted(suffixes, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * suffixes[suffix]
    return float(text)


def _num(value: float) -> float | int:
    value = round(value, 3)
    return int(value) if float(value).is_integer() else value


def spec_amount(value: Any, scale: float) -> float:
    """A Queue spec amount (GPUs, millicores, MB) in display units; -1 (unlimited) stays -1."""
    return -1 if float(value) == -1 else float(value) * scale


def queue_figures(queue: Mapping[str, Any], gpus_in_use: float | None = None) -> dict[str, dict[str, Any]]:
    """One Queue's figures per resource as the api gives them: from the status the binder writes (deserved,
    fair share, allocated, effective limit, requested), else from the spec (quota; an omitted limit is the
    quota). `gpus_in_use` (counted from the pods) replaces the GPU allocation when given."""
    spec = (queue.get("spec") or {}).get("resources") or {}
    status = queue.get("status") or {}
    limits = status.get("effectiveLimit") or {}
    scale = {"gpu": 1, "cpu": 1e-3, "memory": 1e6}  # spec and effectiveLimit units: GPUs, millicores, MB
    out = {}
    for resource, key in (("gpu", GPU), ("cpu", "cpu"), ("memory", "memory")):
        given = spec.get(resource)
        section: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        quota = section.get("quota", 0)
        limit = section.get("limit", quota)
        limit_value = spec_amount(limits[resource] if resource in limits else limit, scale[resource])
        deserved = (status.get("deserved") or {}).get(key)

        def of(part: str, key: str = key, resource: str = resource) -> float:
            return quantity((status.get(part) or {}).get(key, 0), resource)

        allocated = of("allocated")
        if resource == "gpu" and gpus_in_use is not None:
            allocated = gpus_in_use
        quota_value = spec_amount(quota, scale[resource])
        out[resource] = {"deserved": _num(quantity(deserved, resource) if deserved is not None else quota_value),
                         "fairShare": _num(of("fairShare")), "allocated": _num(allocated),
                         "limit": _num(limit_value), "request": _num(of("requested")),
                         "allocatedNonPreemptible": _num(of("allocatedNonPreemptible"))}
    return out


def pod_gpus(pod: Mapping[str, Any]) -> float:
    """The GPUs a pod holds: its whole-GPU requests, or its `gpu-fraction` portion of a shared GPU."""
    whole = 0.0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(GPU, (resources.get("requests") or {}).get(GPU, 0))
        whole += quantity(amount, "gpu")
    if whole:
        return whole
    try:
        return float(((pod.get("metadata") or {}).get("annotations") or {}).get(FRACTION, 0))
    except ValueError:
        return 0.0


def placed(pod: Mapping[str, Any]) -> bool:
    """Bound to a node and not finished: it holds what it asked for."""
    return bool((pod.get("spec") or {}).get("nodeName")) and \
        (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def queue_of(pod: Mapping[str, Any]) -> str:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return next((labels[label] for label in QUEUE_LABELS if labels.get(label)), "")


def gpus_by_queue(pods: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for pod in pods:
        if placed(pod) and queue_of(pod):
            out[queue_of(pod)] = out.get(queue_of(pod), 0.0) + pod_gpus(pod)
    return out


def queues_answer(queues: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Every Queue's figures in the shape of the api's `/v1/queues` (one pseudo-shard: Queue status has none)."""
    in_use = gpus_by_queue(pods)
    figures = {q["metadata"]["name"]: queue_figures(q, in_use.get(q["metadata"]["name"], 0.0)) for q in queues}
    return {"shards": {NO_SHARD: {"revision": None, "producedAt": None, "queues": figures}} if figures else {}}


def node_rows(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per GPU node: capacity, GPUs in use (whole-GPU pods and shared GPUs, each shared GPU held by its
    reservation pod), the portions handed out on shared GPUs, free GPUs and the GPU pods there."""
    rows = {}
    for node in nodes:
        gpus = quantity(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0), "gpu")
        if gpus > 0:
            meta = node.get("metadata") or {}
            rows[meta["name"]] = {"node": meta["name"], "pool": (meta.get("labels") or {}).get(NODE_POOL_LABEL, "default"),
                                  "gpus": gpus, "used": 0.0, "whole": 0.0, "shared": 0, "portions": 0.0, "pods": 0}
    for pod in pods:
        row = rows.get((pod.get("spec") or {}).get("nodeName") or "")
        if row is None or not placed(pod):
            continue
        gpus = pod_gpus(pod)
        if (pod.get("metadata") or {}).get("namespace") == RESERVATION_NAMESPACE:
            row["shared"] += 1
            row["used"] += gpus
        elif gpus:
            row["pods"] += 1
            whole = gpus if gpus >= 1 and float(gpus).is_integer() and not _fraction(pod) else 0.0
            row["whole"] += whole
            row["used"] += whole
            row["portions"] += 0.0 if whole else gpus
    out = []
    for row in sorted(rows.values(), key=lambda r: (r["pool"], r["node"])):
        row["free"] = max(0.0, row["gpus"] - row["used"])
        out.append({k: _num(v) if isinstance(v, float) else v for k, v in row.items()})
    return out


def _fraction(pod: Mapping[str, Any]) -> bool:
    return FRACTION in (((pod.get("metadata") or {}).get("annotations")) or {})


def shoal_events(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Shoal's core/v1 events (the binder's: Unschedulable, Scheduled, Evict, …), oldest first, flattened."""
    out = []
    for e in events:
        component = e.get("reportingComponent") or (e.get("source") or {}).get("component")
        if component != SHOAL_COMPONENT:
            continue
        obj = e.get("involvedObject") or {}
        out.append({"time": e.get("lastTimestamp") or e.get("eventTime") or "", "type": e.get("type", ""),
                    "reason": e.get("reason", ""), "object": f"{obj.get('kind', '')}/{obj.get('name', '')}",
                    "namespace": obj.get("namespace", ""), "message": e.get("message", ""),
                    "count": e.get("count", 1)})
    return sorted(out, key=lambda e: e["time"])

"""Pure builders of the Kubernetes objects and patches the binder writes (KAI's shapes and names)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime

from shoal.core.ingest import gpu_env
from shoal.core.kai_labels import (
    GPU_GROUP_LABEL,
    GPU_SHARED_LABEL,
    POD_GROUP_ANNOTATION,
    RESERVE_GPU_ANNOTATION,
)
from shoal.core.model import (
    ANNOTATION_BIND_FAILURES,
    ANNOTATION_LAST_BIND_ERROR,
    ANNOTATION_LAST_BIND_FAILURE,
)
from shoal.core.plan_effects import gpus_text

RESERVE_ANNOTATION = RESERVE_GPU_ANNOTATION
RESERVATION_APP = "kai-resource-reservation"
SHARED_LABEL = GPU_SHARED_LABEL
COMPONENT = "shoal-scheduler"
RESERVATION_IMAGE = "registry.k8s.io/pause:3.10"


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def binding(pod: str, node: str, pod_group: str = "", metadata: dict | None = None) -> dict:
    """The pod's Binding to `node`. The apiserver copies a Binding's annotations (and, since v1.35, its labels)
    onto the pod in the write that binds it: with `pod_group` ("ns/name") it carries the pod-group-name
    annotation, so a bare pod bound before the podgrouper annotated it needs no second write for it (the
    podgrouper finds it there); `metadata` ({"labels": …, "annotations": …}) a fraction's (`binding_metadata`)."""
    namespace, name = split(pod)
    labels = dict((metadata or {}).get("labels") or {})
    annotations = dict((metadata or {}).get("annotations") or {})
    group = split(pod_group)[1]
    if group:
        annotations[POD_GROUP_ANNOTATION] = group
    meta: dict = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


def eviction(pod: str) -> dict:
    namespace, name = split(pod)
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}


def reservation_name(node: str, group: str) -> str:
    """Deterministic, as KAI since v0.16: one name per (node, group), so a replayed plan finds the pod."""
    return "gpu-reservation-" + hashlib.sha256(f"{node}/{group}".encode()).hexdigest()[:16]


def reservation_pod(node: str, group: str, namespace: str, *, tolerations: list | None = None,
                    service_account: str = "", image: str = RESERVATION_IMAGE,
                    annotations: dict[str, str] | None = None) -> dict:
    spec = {
        "nodeName": node,
        "containers": [{"name": "reservation", "image": image,
                        "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}],
        "terminationGracePeriodSeconds": 0,
        "tolerations": tolerations or [],
    }
    if service_account:
        spec["serviceAccountName"] = service_account
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": reservation_name(node, group), "namespace": namespace,
                         "labels": {"app": RESERVATION_APP, GPU_GROUP_LABEL: group},
                         "annotations": {"karpenter.sh/do-not-disrupt": "true", **(annotations or {})}},
            "spec": spec}


def fraction_configmaps(pod: dict, uuids: list[str], portion: str,
                        extra: dict[str, str] | None = None) -> tuple[dict, dict]:
    """The pod's two GPU ConfigMaps (KAI's names, `gpu_env`), owned by the pod: the capabilities map
    (NVIDIA_VISIBLE_DEVICES, GPU_PORTION, RUNAI_NUM_OF_GPUS; its container reads them by configMapKeyRef) and
    the `-evar` map its container reads with envFrom (empty here; the node agent adds MPS limits to it)."""
    meta = pod["metadata"]
    owner = {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}]}

    def configmap(name: str, data: dict) -> dict:
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": meta["namespace"], **owner}, "data": data}

    capabilities = configmap(gpu_env.capabilities_name(pod), {
        "NVIDIA_VISIBLE_DEVICES": ",".join(uuids), "GPU_PORTION": portion, "RUNAI_NUM_OF_GPUS": portion,
        **(extra or {})})
    return capabilities, configmap(gpu_env.evar_name(pod), {})


def core_event(kind: str, namespace: str, name: str, uid: str, reason: str, message: str, event_type: str,
               *, api_version: str = "v1", annotations: dict | None = None, now: str | None = None) -> dict:
    now = now or utc_now()
    digest = hashlib.sha256(f"{kind}/{namespace}/{name}/{reason}/{message}/{now}".encode()).hexdigest()[:10]
    meta: dict = {"name": f"{name[:200]}.{digest}", "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Event", "metadata": meta,
            "involvedObject": {"apiVersion": api_version, "kind": kind, "name": name, "namespace": namespace,
                               "uid": uid},
            "reason": reason, "message": message[:1024], "type": event_type,
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT, "reportingInstance": COMPONENT,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1}


def _cpu(milli: int) -> str:
    return "-1" if milli < 0 else f"{milli}m"


def _list(cpu: int, memory: int, gpu: int) -> dict[str, str]:
    return {"cpu": _cpu(cpu), "memory": str(memory) if memory >= 0 else "-1", "nvidia.com/gpu": gpus_text(gpu)}


def _spec_units(value: int, per_unit: int) -> float | int:
    if value < 0:
        return -1
    number = value / per_unit
    return int(number) if number == int(number) else round(number, 6)


def queue_status(figures) -> dict:  # figures: shoal.core.plan.QueueFigures
    """Queue.status from the planner's figures: KAI's allocated / allocatedNonPreemptible / requested
    ResourceLists, plus Shoal's deserved, fairShare and effectiveLimit (in spec units: GPUs, millicores, MB)."""
    def pick(attr: str) -> dict[str, str]:
        return _list(getattr(figures.cpu, attr), getattr(figures.memory, attr), getattr(figures.gpu, attr))

    return {"allocated": pick("allocated"), "allocatedNonPreemptible": pick("allocated_non_preemptible"),
            "requested": pick("request"), "deserved": pick("deserved"), "fairShare": pick("fair_share"),
            "effectiveLimit": {"gpu": _spec_units(figures.gpu.limit, 1000),
                               "cpu": _spec_units(figures.cpu.limit, 1),
                               "memory": _spec_units(figures.memory.limit, 1_000_000)}}


MAX_BIND_ERROR = 512


def bind_failure_patch(current: Mapping | None, error: str, now: str) -> tuple[int, dict]:
    """The PodGroup merge patch after a failed bind round (shoal.core.bindbackoff): the count one higher, the
    time and the error (cut to MAX_BIND_ERROR characters); with the new count."""
    annotations = ((current or {}).get("metadata") or {}).get("annotations") or {}
    raw = str(annotations.get(ANNOTATION_BIND_FAILURES) or "").strip()
    failures = (int(raw) if raw.isdigit() else 0) + 1
    return failures, {"metadata": {"annotations": {ANNOTATION_BIND_FAILURES: str(failures),
                                                   ANNOTATION_LAST_BIND_FAILURE: now,
                                                   ANNOTATION_LAST_BIND_ERROR: error[:MAX_BIND_ERROR]}}}

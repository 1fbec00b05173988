"""The snapshot path before typed snapshots, kept as the reference the typed one is checked against.

The shard's raw objects (trimmed manifests, as the snapshotter stored them) with decisions in flight overlaid
on the manifests, for `snapshot_from_objects`: what the planner re-ingested every cycle until the snapshotter
kept typed models (`services.snapshotter.translate`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence

from shoal.core.ingest.grouping import skips_podgrouper
from shoal.messages.snapshot import InFlightBind

GPU_GROUP_LABEL = "runai-gpu-group"

POOL_LABEL = "kai.scheduler/node-pool"
DEFAULT_SHARD = "default"

_META_KEYS = ("name", "namespace", "uid", "labels", "annotations", "creationTimestamp",
              "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences", "resourceVersion")
_POD_SPEC_KEYS = ("nodeName", "schedulerName", "containers", "initContainers", "nodeSelector", "affinity",
                  "tolerations", "priorityClassName", "priority", "overhead", "runtimeClassName",
                  "schedulingGates", "terminationGracePeriodSeconds")
_CONTAINER_KEYS = ("name", "resources")
_CLUSTER_WIDE = frozenset({"Queue", "PriorityClass", "Topology", "PodDisruptionBudget", "SchedulerConfig"})


def trim_meta(meta: Mapping) -> dict:
    return {k: meta[k] for k in _META_KEYS if meta.get(k) not in (None, {}, [])}


def trim(obj: Mapping) -> dict:
    """An object as the snapshot keeps it."""
    kind = obj.get("kind", "")
    out = {"apiVersion": obj.get("apiVersion", ""), "kind": kind, "metadata": trim_meta(obj.get("metadata") or {})}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if kind == "Pod":
        pod_spec = {k: spec[k] for k in _POD_SPEC_KEYS if spec.get(k) not in (None, {}, [])}
        for key in ("containers", "initContainers"):
            if key in pod_spec:
                pod_spec[key] = [{k: c[k] for k in _CONTAINER_KEYS if k in c} for c in pod_spec[key]]
        out["spec"] = pod_spec
        out["status"] = {k: status[k] for k in ("phase", "nominatedNodeName", "startTime") if status.get(k)}
    elif kind == "Node":
        out["spec"] = {k: spec[k] for k in ("taints", "unschedulable") if spec.get(k)}
        out["status"] = {k: status[k] for k in ("allocatable", "capacity", "conditions") if status.get(k)}
    else:  # everything but server-side bookkeeping (PriorityClass keeps `value` at the top level)
        out.update({k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")})
        if kind in ("PodGroup", "PodDisruptionBudget") and status:
            out["status"] = status
    return out


def shard_of(obj: Mapping) -> str:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(POOL_LABEL) or DEFAULT_SHARD


def shard_objects(objects: Iterable[Mapping], shard: str, scheduler_name: str, *,
                  require_podgroup: bool = False) -> list[dict]:
    """The trimmed objects of one shard, sorted by (kind, namespace, name) for a stable snapshot."""
    objects = list(objects)
    nodes = {o["metadata"]["name"] for o in objects if o.get("kind") == "Node" and shard_of(o) == shard}
    groups = ({_key(o) for o in objects if o.get("kind") == "PodGroup"} if require_podgroup else None)
    out = []
    for obj in objects:
        kind = obj.get("kind")
        if kind == "Node":
            keep = obj["metadata"]["name"] in nodes
        elif kind == "Pod":
            keep = _pod_in_shard(obj, shard, nodes, scheduler_name, groups)
        elif kind == "PodGroup":
            keep = shard_of(obj) == shard
        else:
            keep = kind in _CLUSTER_WIDE
        if keep:
            out.append(trim(obj))
    out.sort(key=lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"].get("name", "")))
    return out


def _key(obj: Mapping) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def _pod_in_shard(pod: Mapping, shard: str, nodes: set[str], scheduler_name: str,
                  groups: set[str] | None = None) -> bool:
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return False
    node = spec.get("nodeName")
    if node:
        return node in nodes
    if spec.get("schedulerName") != scheduler_name or shard_of(pod) != shard:
        return False
    if groups is None:
        return True
    meta = pod.get("metadata") or {}
    named = (meta.get("annotations") or {}).get("pod-group-name")
    own = f"pg-{meta.get('name')}-{meta.get('uid')}"  # the podgrouper's name for a bare pod's PodGroup
    if named in (None, "", own) and not meta.get("ownerReferences") and not skips_podgrouper(pod):
        return True  # bare: grouped by the pod alone, it need not wait for the podgrouper's PodGroup
    return bool(named) and f"{meta.get('namespace') or 'default'}/{named}" in groups


def shards_of(objects: Iterable[Mapping]) -> list[str]:
    """Every shard that has at least one node."""
    return sorted({shard_of(o) for o in objects if o.get("kind") == "Node"})


def overlay_inflight(objects: Sequence[dict], inflight: Iterable[InFlightBind], now_s: float) -> list[dict]:
    """The snapshot objects with every unexpired in-flight bind applied: the pod shows as placed on its
    node (and in its GPU groups), so its resources count as allocated and it is not planned twice."""
    live = {e.pod_uid: e for e in inflight if e.expires_at > now_s}
    by_name = {e.pod: e for e in live.values()}
    out = []
    for obj in objects:
        if obj.get("kind") == "Pod":
            meta = obj.get("metadata") or {}
            entry = live.get(meta.get("uid", "")) or by_name.get(f"{meta.get('namespace')}/{meta.get('name')}")
            if entry is not None and not (obj.get("spec") or {}).get("nodeName"):
                obj = copy.deepcopy(obj)
                obj.setdefault("spec", {})["nodeName"] = entry.node
                if entry.gpu_groups:
                    labels = obj["metadata"].setdefault("labels", {})
                    if len(entry.gpu_groups) == 1:
                        labels[GPU_GROUP_LABEL] = entry.gpu_groups[0]
                    else:
                        for group in entry.gpu_groups:
                            labels[f"{GPU_GROUP_LABEL}/{group}"] = group
        out.append(obj)
    return out

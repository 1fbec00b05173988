"""The dashboard's GPU map, built from a shard's snapshot model (pure: no I/O).

    gpu_map(model, reservation_namespace="kai-resource-reservation")
    # [{"name": "n1", "pool": "pool-a", "gpus": 2, "ready": True, "cells": [
    #    {"state": "whole", "pods": [{"pod": "ns/train-0", "queue": "q", "podGroup": "ns/train", ...}]},
    #    {"state": "shared", "group": "<uuid>", "usedMilli": 500, "reservation": "kai-resource-reservation/r-…",
    #     "parts": [{"pod": "ns/infer-0", "milli": 500, "releasing": False, ...}]},
    #    {"state": "free"}], "pipelined": [...], "pods": 3}]

A node's GPUs are drawn as cells in a fixed order: whole-GPU pods (by pod name; a pod holding 2 GPUs takes 2
cells), then shared GPUs (by group id), then free ones. The snapshot records how many devices a whole-GPU pod
holds, not which device index, so a cell's position is not the device's index on the node. A releasing pod
(being deleted) marks its cells `releasing`; a pod pipelined onto the node (waiting for releasing resources)
is listed under `pipelined`, and the releasing cells show that someone waits for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shoal.core.ingest.shard_model import ShardModel
from shoal.core.kai_labels import QUEUE_LABELS
from shoal.core.model import DEFAULT_RESERVATION_NAMESPACE, PHASE_FAILED, PHASE_SUCCEEDED, Node, Pod

DEVICE_MILLI = 1000
DONE = (PHASE_SUCCEEDED, PHASE_FAILED)


def queue_of(pod: Pod, model: ShardModel) -> str:
    """The pod's queue: its PodGroup's, else its queue label ("" when neither says)."""
    group = model.pod_groups.get(f"{pod.namespace}/{pod.pod_group}") if pod.pod_group else None
    if group is not None and group.queue:
        return group.queue
    return next((pod.labels[label] for label in QUEUE_LABELS if pod.labels.get(label)), "")


def pod_ref(pod: Pod, model: ShardModel) -> dict[str, Any]:
    """What a cell's tooltip says about a pod."""
    return {"pod": pod.key, "queue": queue_of(pod, model),
            "podGroup": f"{pod.namespace}/{pod.pod_group}" if pod.pod_group else None,
            "phase": pod.phase, "releasing": pod.deleting}


def fraction_milli(pod: Pod, node: Node) -> int:
    """The milli-GPU a fractional pod takes of each of its shared GPUs (gpu-memory: of the node's GPU memory)."""
    frac = pod.fraction
    if frac is None:
        return 0
    if frac.portion_milli is not None:
        return frac.portion_milli
    memory = node.gpu_memory_mib or 0
    if not memory or not frac.gpu_memory_mib:
        return 0
    return min(DEVICE_MILLI, -(-frac.gpu_memory_mib * DEVICE_MILLI // memory))


def _node_cells(node: Node, pods: Iterable[Pod], model: ShardModel, reservation_ns: str) -> list[dict]:
    whole: list[dict] = []
    shared: dict[str, dict] = {}
    for pod in sorted(pods, key=lambda p: p.key):
        if pod.gpu_groups:
            for group in pod.gpu_groups:
                cell = shared.setdefault(group, {"state": "shared", "group": group, "usedMilli": 0,
                                                 "parts": [], "reservation": None})
                if pod.namespace == reservation_ns:
                    cell["reservation"] = pod.key
                    continue
                milli = fraction_milli(pod, node)
                cell["usedMilli"] += milli
                cell["parts"].append({**pod_ref(pod, model), "milli": milli})
        elif pod.gpus > 0 and pod.namespace != reservation_ns:
            ref = pod_ref(pod, model)
            whole.extend({"state": "releasing" if pod.deleting else "whole", "pods": [ref]}
                         for _ in range(pod.gpus))
    for cell in shared.values():
        if cell["parts"] and all(p["releasing"] for p in cell["parts"]):
            cell["state"] = "releasing"
    cells = whole + [shared[g] for g in sorted(shared)]
    free = max(0, node.gpus - len(cells))
    cells.extend({"state": "free"} for _ in range(free))
    return cells


def gpu_map(model: ShardModel, *, reservation_namespace: str = DEFAULT_RESERVATION_NAMESPACE) -> list[dict]:
    """Every node of the model with its GPU cells, by node name."""
    on_node: dict[str, list[Pod]] = {}
    pipelined: dict[str, list[Pod]] = {}
    for entry in model.pods.values():
        pod = entry.pod
        if pod.phase in DONE:
            continue
        if pod.node_name:
            on_node.setdefault(pod.node_name, []).append(pod)
        elif pod.nominated_node:
            pipelined.setdefault(pod.nominated_node, []).append(pod)
    out = []
    for name in sorted(model.nodes):
        node = model.nodes[name]
        pods = on_node.get(name, [])
        cells = _node_cells(node, pods, model, reservation_namespace)
        waiting = [{**pod_ref(p, model), "gpus": p.gpus, "milli": fraction_milli(p, node)}
                   for p in sorted(pipelined.get(name, []), key=lambda p: p.key)]
        if waiting:
            for cell in cells:
                if cell["state"] == "releasing":
                    cell["pipelined"] = True
        out.append({"name": name, "pool": node.pool or "default", "gpus": node.gpus,
                    "gpuMemoryMiB": node.gpu_memory_mib, "ready": node.ready, "unschedulable": node.unschedulable,
                    "product": node.labels.get("nvidia.com/gpu.product", ""), "pods": len(pods),
                    "cells": cells, "pipelined": waiting})
    return out


def summary(nodes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Cluster totals over GPU-map nodes: GPUs by cell state, and the GPUs in use (shared ones by portion)."""
    counts = {"whole": 0, "shared": 0, "releasing": 0, "free": 0}
    nodes_n = gpus = 0
    used_milli = 0
    for node in nodes:
        nodes_n += 1
        for cell in node["cells"]:
            gpus += 1
            counts[cell["state"]] = counts.get(cell["state"], 0) + 1
            if cell["state"] == "whole":
                used_milli += DEVICE_MILLI
            elif cell["state"] in ("shared", "releasing"):
                used_milli += min(DEVICE_MILLI, cell.get("usedMilli", DEVICE_MILLI))
    return {"nodes": nodes_n, "gpus": gpus, "cells": counts, "gpusInUse": round(used_milli / DEVICE_MILLI, 3)}

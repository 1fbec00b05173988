"""Pure admission rules of KAI v0.18's GPU sharing modes and per-container GPU annotations.

- The mode of a pod is its node pool's (`kai.scheduler/node-pool` label; SHOAL_POOL_GPU_SHARING_MODES), else
  SHOAL_GPU_SHARING_MODE; the legacy SHOAL_GPU_SHARING=false reads as Disabled (as KAI derives it).
- Per-container annotations (`nvidia.com/container.<c>.gpu-memory.request|limit`, `.gpu-compute.mode`) are
  checked with the same rules the planner ingests them by (`shoal.core.ingest.pods.fraction_of`).
- The binder-owned `.gpus.devices` / `.gpu-compute.portion` may not be set by a pod's creator: they grant
  GPU access and cap compute, so a workload able to set them could exempt itself (KAI denies them too).
- Mutation per mode: NonMemoryEnforced points the GPU container at its shared-GPU ConfigMaps
  (`gpu_env.env_patch`); HamiCore adds `CUDA_DEVICE_MEMORY_LIMIT` from the capabilities map (optional, the
  binder writes it); NvFractions uses no ConfigMap: `gpu-memory: N` becomes the per-container request `NMi`.
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal.core.ingest import container_gpu, gpu_env
from shoal.core.ingest.pods import fraction_of
from shoal.core.kai_labels import NODE_POOL_LABEL
from shoal.core.sharing_mode import DISABLED, HAMI_CORE, NV_FRACTIONS, mode_for_pool

HAMI_LIMIT_KEY = "CUDA_DEVICE_MEMORY_LIMIT"
MAX_QUANTITY_CHARS = 64


def _map(value: object) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _annotations(pod: Mapping) -> dict[str, str]:
    return {str(k): str(v) for k, v in _map(_map(pod.get("metadata")).get("annotations")).items()}


def pod_mode(pod: Mapping, default: str, pool_modes: Mapping[str, str], gpu_sharing: bool = True) -> str:
    if not gpu_sharing:
        return DISABLED
    pool = _map(_map(pod.get("metadata")).get("labels")).get(NODE_POOL_LABEL)
    return mode_for_pool(default, pool_modes, str(pool) if pool else None)


def binder_owned_problem(pod: Mapping) -> str | None:
    for key in sorted(_annotations(pod)):
        if container_gpu.is_binder_owned(key):
            return f"{key}: this annotation is written by Shoal's binder when it binds the pod; a pod may not set it"
    return None


def container_problem(pod: Mapping) -> str | None:
    """The per-container annotations' problem (KAI's texts), None when valid or absent."""
    annotations = _annotations(pod)
    if not container_gpu.has_container_annotations(annotations):
        return None
    for key in sorted(annotations):  # the quantity parser raises past 4300 digits: no quantity is that long
        if key.startswith(container_gpu.PREFIX) and key.endswith((container_gpu.REQUEST, container_gpu.LIMIT)) and (
                len(annotations[key]) > MAX_QUANTITY_CHARS):
            return f"{key} annotation value must be a valid Kubernetes memory quantity greater than 0"
    spec = _map(pod.get("spec"))
    listed = spec.get("containers")
    containers: list = listed if isinstance(listed, list) else []
    names = tuple(str(_map(c).get("name") or "") for c in containers)
    whole = 0
    listed_init = spec.get("initContainers")
    init: list = listed_init if isinstance(listed_init, list) else []
    for c in [*containers, *init]:
        resources = _map(_map(c).get("resources"))
        if any("nvidia.com/gpu" in _map(resources.get(s)) for s in ("requests", "limits")):
            whole = 1
    return fraction_of(annotations, whole, names)[1]


def mode_patch(pod: Mapping, mode: str, random7: str) -> list[dict]:
    """The GPU env / annotation patch of a valid fraction pod in `mode`."""
    if mode == DISABLED:
        return []
    if mode == NV_FRACTIONS:
        return _nvfractions_patch(pod)
    ops = gpu_env.env_patch(pod, random7)
    if mode == HAMI_CORE and ops:
        ops = _with_hami_limit(ops)
    return ops


def _nvfractions_patch(pod: Mapping) -> list[dict]:
    annotations = _annotations(pod)
    memory = annotations.get("gpu-memory", "").strip()
    section, index = gpu_env.gpu_container(pod)
    containers = _map(pod.get("spec")).get(section)
    if not memory.isdigit() or not isinstance(containers, list) or index >= len(containers):
        return []
    name = str(_map(containers[index]).get("name") or "")
    key = container_gpu.request_key(name)
    if key in annotations:
        return []
    return [{"op": "add", "path": "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1"),
             "value": f"{int(memory)}Mi"}]


def _with_hami_limit(ops: list[dict]) -> list[dict]:
    """Add `CUDA_DEVICE_MEMORY_LIMIT` (configMapKeyRef, optional) to the env op of the GPU container."""
    out = []
    for op in ops:
        if op["path"].endswith("/env") and isinstance(op.get("value"), list):
            refs = [e for e in op["value"] if _map(e).get("name") == "NVIDIA_VISIBLE_DEVICES"]
            capabilities = refs[0]["valueFrom"]["configMapKeyRef"]["name"] if refs else ""
            kept = [e for e in op["value"] if _map(e).get("name") != HAMI_LIMIT_KEY]
            hami = {"name": HAMI_LIMIT_KEY, "valueFrom": {"configMapKeyRef": {
                "name": capabilities, "key": HAMI_LIMIT_KEY, "optional": True}}}
            op = {**op, "value": [*kept, hami]}
        out.append(op)
    return out

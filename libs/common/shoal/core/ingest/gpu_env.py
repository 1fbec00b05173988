"""How a fractional pod's container gets its GPU, as KAI does it (reference gpu-sharing §2.1, §2.3).

Admission names a ConfigMap prefix in the pod's annotation `runai/shared-gpu-configmap`
(`<owner or pod name>-<7 random>-shared-gpu`) and points the GPU container's env at two ConfigMaps:
`<prefix>-<idx>` (the "capabilities" map: NVIDIA_VISIBLE_DEVICES, GPU_PORTION, RUNAI_NUM_OF_GPUS, each a
`configMapKeyRef`) and `<prefix>-<idx>-evar` (`envFrom`: env the node agent adds, e.g. MPS limits). `<idx>` is
the container's index, `i<idx>` for an init container. The binder fills both maps before it binds the pod,
so the kubelet starts the container with the reserved GPU's UUID. Pure: the random part is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal.core.ingest.container_gpu import annotated_container

SHARED_CONFIGMAP_ANNOTATION = "runai/shared-gpu-configmap"
CONTAINER_NAME_ANNOTATION = "gpu-fraction-container-name"
CAPABILITY_KEYS = ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")


def _map(value: object) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _names(items: object) -> list[str]:
    return [str(_map(c).get("name") or "") for c in items] if isinstance(items, list) else []


def gpu_container(pod: Mapping) -> tuple[str, int]:
    """The GPU container's (section, index): `gpu-fraction-container-name` when it names one, else the one
    the per-container annotations (`nvidia.com/container.<name>.…`) name, else the first container. Section is
    "containers" or "initContainers"."""
    spec = _map(pod.get("spec"))
    annotations = _map(_map(pod.get("metadata")).get("annotations"))
    wanted = annotations.get(CONTAINER_NAME_ANNOTATION) or annotated_container(annotations)
    if wanted:
        for section in ("containers", "initContainers"):
            names = _names(spec.get(section))
            if wanted in names:
                return section, names.index(wanted)
    return "containers", 0


def _suffix(section: str, index: int) -> str:
    return f"i{index}" if section == "initContainers" else str(index)


def container_suffix(pod: Mapping) -> str:
    """KAI's index of the GPU container in its ConfigMap names: "<idx>", or "i<idx>" for an init container."""
    return _suffix(*gpu_container(pod))


def configmap_prefix(pod: Mapping) -> str:
    """The prefix admission stored, or (a pod admitted without it) "<pod name>-shared-gpu"."""
    meta = _map(pod.get("metadata"))
    stored = _map(meta.get("annotations")).get(SHARED_CONFIGMAP_ANNOTATION)
    return str(stored) if stored else f"{meta.get('name') or ''}-shared-gpu"


def capabilities_name(pod: Mapping) -> str:
    return f"{configmap_prefix(pod)}-{container_suffix(pod)}"


def evar_name(pod: Mapping) -> str:
    return f"{capabilities_name(pod)}-evar"


def new_prefix(pod: Mapping, random7: str) -> str:
    """A prefix for a pod being admitted: its controller's (first owner's) name, else its name or
    generateName, then 7 random characters (a name unique per pod, also for generated pod names)."""
    meta = _map(pod.get("metadata"))
    owners = meta.get("ownerReferences")
    owner = str(_map(owners[0]).get("name") or "") if isinstance(owners, list) and owners else ""
    base = owner or str(meta.get("name") or "") or str(meta.get("generateName") or "").rstrip("-") or "pod"
    return f"{base[:200]}-{random7}-shared-gpu"


def env_patch(pod: Mapping, random7: str) -> list[dict]:
    """JSON Patch operations that point the GPU container at its ConfigMaps (and store the prefix), or []
    when the pod has no such container. A pod that already names its prefix keeps it."""
    spec = _map(pod.get("spec"))
    section, index = gpu_container(pod)
    containers = spec.get(section)
    if not isinstance(containers, list) or index >= len(containers) or not isinstance(containers[index], Mapping):
        return []
    meta = _map(pod.get("metadata"))
    annotations = _map(meta.get("annotations"))
    ops: list[dict] = []
    prefix = annotations.get(SHARED_CONFIGMAP_ANNOTATION)
    if not prefix:
        prefix = new_prefix(pod, random7)
        if isinstance(meta.get("annotations"), Mapping):
            ops.append({"op": "add", "path": "/metadata/annotations/runai~1shared-gpu-configmap", "value": prefix})
        else:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {SHARED_CONFIGMAP_ANNOTATION: prefix}})
    capabilities = f"{prefix}-{_suffix(section, index)}"
    container = containers[index]
    base = f"/spec/{section}/{index}"
    env = container.get("env") if isinstance(container.get("env"), list) else None
    kept = [e for e in env or [] if not (isinstance(e, Mapping) and e.get("name") in CAPABILITY_KEYS)]
    refs = [{"name": key, "valueFrom": {"configMapKeyRef": {"name": capabilities, "key": key}}}
            for key in CAPABILITY_KEYS]
    ops.append({"op": "add" if env is None else "replace", "path": f"{base}/env", "value": [*kept, *refs]})
    source = {"configMapRef": {"name": f"{capabilities}-evar"}}
    env_from = container.get("envFrom")
    if not isinstance(env_from, list):
        ops.append({"op": "add", "path": f"{base}/envFrom", "value": [source]})
    elif source not in env_from:
        ops.append({"op": "add", "path": f"{base}/envFrom/-", "value": source})
    return ops

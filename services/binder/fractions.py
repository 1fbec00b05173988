"""What a shared GPU's bind writes in each GPU sharing mode (pure; KAI v0.18's binder plugins).

- NonMemoryEnforced: the two shared-GPU ConfigMaps (`kubeobjects.fraction_configmaps`).
- HamiCore: the same, plus `CUDA_DEVICE_MEMORY_LIMIT=<MiB>m` in the capabilities map for HAMi-core: the
  fraction's memory (its per-container limit for a dynamic fraction). A memory that cannot be computed (a
  `gpu-fraction` on a node without `nvidia.com/gpu.memory`) fails the bind, never a pod without a limit.
- NvFractions: no ConfigMap; pod annotations `nvidia.com/container.<c>.gpus.devices=<uuid,…>` and, when the
  pod has none, `nvidia.com/container.<c>.gpu-memory.request=<MiB>Mi` (the runtime applies CUDA memory limits
  from them).
- Disabled: a fraction bind fails with KAI's text (admission and the planner refuse them first).

Every new reservation pod records the compute mode of the pod that opened its GPU in
`nvidia.com/container.reservation.gpu-compute.mode`, which the snapshot reads back for the group.
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal.core.ingest import container_gpu, gpu_env
from shoal.core.plan import Bind
from shoal.core.sharing_mode import DISABLED, HAMI_CORE, NV_FRACTIONS, TIME_SLICING, disabled_message

RESERVATION_CONTAINER = "reservation"
HAMI_LIMIT_KEY = "CUDA_DEVICE_MEMORY_LIMIT"


class FractionRefused(ValueError):
    """A fraction bind that cannot be done in the mode (the message says why)."""


def reservation_annotations(compute_mode: str | None) -> dict[str, str]:
    return {container_gpu.compute_mode_key(RESERVATION_CONTAINER): compute_mode or TIME_SLICING}


def _memory(op: Bind) -> int | None:
    return op.gpu_memory_limit_mib or op.gpu_memory_mib


def capabilities_extra(op: Bind, mode: str) -> dict[str, str]:
    """Keys the capabilities ConfigMap gets on top of KAI's three (HamiCore's memory limit)."""
    if mode != HAMI_CORE:
        return {}
    memory = _memory(op)
    if not memory:
        raise FractionRefused(f"HamiCore: the GPU memory of {op.pod} on node {op.node} is unknown (no "
                              "nvidia.com/gpu.memory label), so CUDA_DEVICE_MEMORY_LIMIT cannot be set")
    return {HAMI_LIMIT_KEY: f"{memory}m"}


def uses_configmaps(mode: str) -> bool:
    return mode not in (NV_FRACTIONS, DISABLED)


def pod_annotations(pod: Mapping, op: Bind, uuids: list[str], mode: str) -> dict[str, str]:
    """The annotations the bind writes on the fractional pod besides `received-resource-type`."""
    if mode == DISABLED:
        raise FractionRefused(disabled_message(op.pod))
    if mode != NV_FRACTIONS:
        return {}
    section, index = gpu_env.gpu_container(pod)
    containers = (pod.get("spec") or {}).get(section) or []
    if index >= len(containers):
        raise FractionRefused(f"NvFractions: pod {op.pod} has no container to give the GPU to")
    name = str(containers[index].get("name") or "")
    out = {container_gpu.devices_key(name): ",".join(uuids)}
    have = (pod.get("metadata") or {}).get("annotations") or {}
    if container_gpu.request_key(name) not in have and container_gpu.limit_key(name) not in have:
        if not op.gpu_memory_mib:
            raise FractionRefused(f"NvFractions: the GPU memory of {op.pod} on node {op.node} is unknown (no "
                                  "nvidia.com/gpu.memory label)")
        out[container_gpu.request_key(name)] = f"{op.gpu_memory_mib}Mi"
    return out

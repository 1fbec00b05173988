"""MIG exclusivity and GPU-memory swap accounting (pure).

- A node is MIG-enabled when any GPU reports MIG mode on, or its labels say so
  (`node-role.kubernetes.io/mig-enabled=true`, `nvidia.com/mig.strategy` single/mixed, or any
  `nvidia.com/mig-*` allocatable). Fractions and MIG exclude each other: a fractional pod there gets
  a `GPUSharingUnsupportedOnMIG` Warning and no GPU.
- Swap (`run.ai/swap-enabled=true` node label): a shared GPU's capacity is its memory minus the
  2 GiB Run:ai reserves for non-swappable context. Real swap is not implemented; a pod asking for it
  (annotation `gpu-memory-swap`) gets a `GPUMemorySwapNotSupported` Warning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from services.nodeagent.inventory import Gpu

SWAP_LABEL = "run.ai/swap-enabled"
SWAP_RESERVED_MIB = 2048
MIG_REFUSED_REASON = "GPUSharingUnsupportedOnMIG"
SWAP_REASON = "GPUMemorySwapNotSupported"


@dataclass(frozen=True)
class Refusal:
    pod_key: str
    reason: str
    message: str


def node_is_mig(gpus: Iterable[Gpu], labels: Mapping[str, str], allocatable: Mapping[str, str]) -> bool:
    if any(g.mig_enabled for g in gpus):
        return True
    if labels.get("node-role.kubernetes.io/mig-enabled") == "true":
        return True
    if labels.get("nvidia.com/mig.strategy") in ("single", "mixed"):
        return True
    return any(k.startswith("nvidia.com/mig-") for k in allocatable)


def swap_enabled(labels: Mapping[str, str]) -> bool:
    return labels.get(SWAP_LABEL) == "true"


def capacity_mib(gpu: Gpu, labels: Mapping[str, str], reserved_mib: int = SWAP_RESERVED_MIB) -> int:
    """Memory the shares of a GPU may use: all of it, or all but the swap reserve on swap nodes."""
    if swap_enabled(labels):
        return max(0, gpu.memory_total_mib - reserved_mib)
    return gpu.memory_total_mib


def mig_refusal(pod_key: str, node_name: str) -> Refusal:
    return Refusal(
        pod_key,
        MIG_REFUSED_REASON,
        f"node {node_name} has MIG enabled: GPU fractions cannot run on MIG devices; "
        "request a MIG profile (nvidia.com/mig-<profile>) or use a node without MIG",
    )


def swap_refusal(pod_key: str) -> Refusal:
    return Refusal(
        pod_key,
        SWAP_REASON,
        "GPU memory swap is not supported by Shoal: the pod runs without swap; swap-enabled nodes only "
        f"account capacity minus the reserved {SWAP_RESERVED_MIB} MiB",
    )

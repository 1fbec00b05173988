"""A fractional pod's GPU share from its annotations (Run:ai / KAI names), pure.

Memory: `gpu-fraction: f` (0 < f < 1) → floor(f × GPU MiB); `gpu-memory: m` (positive MiB).
Dynamic fractions: `gpu-fraction-limit` (f ≤ limit ≤ 1) or `gpu-memory-limit` (MiB ≥ request);
without a limit the limit equals the request (a static fraction).
KAI v0.18 per-container memory (`nvidia.com/container.<c>.gpu-memory.request|limit`, Kubernetes quantities,
rounded up to MiB; a limit alone is also the request) is a memory request like `gpu-memory`, and the pod's
`.gpu-compute.mode` is kept on the share (`compute_mode`, None when not stated).
Compute per time-slicing mode (gpu-sharing.md §1.3):
  gpu-fraction x → strict x / x, fair x / 1.0;  gpu-memory → 0 / 1.0 in both modes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from services.nodeagent.translate import PodView
from shoal.core.ingest import container_gpu, gpu_env
from shoal.core.ingest.quantity import QuantityError, parse_quantity
from shoal.core.kai_labels import (
    FRACTION,
    FRACTION_LIMIT,
    GPU_MEMORY,
    GPU_MEMORY_LIMIT,
    gpu_groups_of,
)

SHARED_CONFIGMAP = gpu_env.SHARED_CONFIGMAP_ANNOTATION
SWAP_REQUEST = "gpu-memory-swap"


@dataclass(frozen=True)
class ShareSpec:
    pod_uid: str
    pod_key: str
    mem_request_mib: int
    mem_limit_mib: int
    compute_request: Fraction
    compute_limit: Fraction
    priority: int
    created: str
    fraction: Fraction | None  # the gpu-fraction, when the request was given as one
    compute_mode: str | None = None  # nvidia.com/container.<c>.gpu-compute.mode, when stated

    @property
    def dynamic(self) -> bool:
        return self.mem_limit_mib > self.mem_request_mib


@dataclass(frozen=True)
class ShareError:
    pod_key: str
    message: str


def is_fractional(pod: PodView) -> bool:
    return FRACTION in pod.annotations or GPU_MEMORY in pod.annotations or (
        container_gpu.has_memory_annotations(pod.annotations))


def gpu_groups(pod: PodView) -> tuple[str, ...]:
    """The shared-GPU groups a pod belongs to: label `runai-gpu-group`, or `runai-gpu-group/<g>` (multi-device)."""
    return gpu_groups_of(pod.labels)


def _fraction(pod: PodView, key: str) -> Fraction | ShareError:
    try:
        value = parse_quantity(pod.annotations[key])
    except QuantityError:
        return ShareError(pod.key, f"annotation {key}={pod.annotations[key]!r} is not a number")
    return value


def _mib(pod: PodView, key: str) -> int | ShareError:
    text = pod.annotations[key].strip()
    if not text.isdigit() or int(text) <= 0:
        return ShareError(pod.key, f"annotation {key}={pod.annotations[key]!r} must be a positive integer of MiB")
    return int(text)


def parse_share(pod: PodView, gpu_memory_mib: int, mode: str = "none") -> ShareSpec | ShareError:
    """The pod's share of one GPU of `gpu_memory_mib` (its capacity), or why the annotations are invalid."""
    if FRACTION in pod.annotations and GPU_MEMORY in pod.annotations:
        return ShareError(pod.key, "cannot request both GPU and GPU memory")
    fraction: Fraction | None = None
    per_container, problem = container_gpu.container_gpu_of(
        pod.annotations, (container_gpu.annotated_container(pod.annotations) or "",))
    if problem:
        return ShareError(pod.key, problem)
    if per_container is not None and per_container.request_mib is not None:
        request = per_container.request_mib
        limit = max(per_container.limit_mib or request, request)
        compute_request, compute_limit = Fraction(0), Fraction(1)
    elif FRACTION in pod.annotations:
        got = _fraction(pod, FRACTION)
        if isinstance(got, ShareError):
            return got
        if not 0 < got < 1:
            return ShareError(pod.key, f"gpu-fraction {pod.annotations[FRACTION]!r} must be in (0, 1)")
        fraction = got
        request = math.floor(fraction * gpu_memory_mib)
        limit = request
        if FRACTION_LIMIT in pod.annotations:
            lim = _fraction(pod, FRACTION_LIMIT)
            if isinstance(lim, ShareError):
                return lim
            if not fraction <= lim <= 1:
                return ShareError(
                    pod.key, f"gpu-fraction-limit {pod.annotations[FRACTION_LIMIT]!r} must be in [gpu-fraction, 1]"
                )
            limit = math.floor(lim * gpu_memory_mib)
        compute_request = fraction
        compute_limit = fraction if mode == "strict" else Fraction(1)
    elif GPU_MEMORY in pod.annotations:
        got_mib = _mib(pod, GPU_MEMORY)
        if isinstance(got_mib, ShareError):
            return got_mib
        request = got_mib
        limit = request
        if GPU_MEMORY_LIMIT in pod.annotations:
            lim_mib = _mib(pod, GPU_MEMORY_LIMIT)
            if isinstance(lim_mib, ShareError):
                return lim_mib
            if lim_mib < request:
                return ShareError(pod.key, f"gpu-memory-limit {lim_mib} is below gpu-memory {request}")
            limit = lim_mib
        compute_request, compute_limit = Fraction(0), Fraction(1)
    else:
        return ShareError(pod.key, "not a fractional pod")
    compute_mode = container_gpu.compute_mode_of(pod.annotations)
    if compute_mode == "sm-sharing" and compute_request == 0 and gpu_memory_mib > 0:
        compute_request = Fraction(min(request, gpu_memory_mib), gpu_memory_mib)  # its SMs: its share of the card
    return ShareSpec(
        pod_uid=pod.uid,
        pod_key=pod.key,
        mem_request_mib=request,
        mem_limit_mib=min(limit, gpu_memory_mib),
        compute_request=compute_request,
        compute_limit=compute_limit,
        priority=pod.priority,
        created=pod.created,
        fraction=fraction,
        compute_mode=compute_mode,
    )

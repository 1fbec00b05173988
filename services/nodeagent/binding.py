"""Which GPU each reservation / whole-GPU pod holds, and whose processes use which share (pure).

Device assignment (`assign_devices`):
- Existing annotations are the truth: a reservation pod's `run.ai/reserve_for_gpu_index` and, in fake
  mode, a whole-GPU pod's `shoal.io/gpu-devices` are kept as they are, so an agent restart rebuilds
  its state from the cluster and changes nothing.
- Devices observed on the node (real mode: NVIDIA_VISIBLE_DEVICES the device plugin put into the
  pod's processes) come next.
- Only when `may_choose` (fake mode, where no device plugin exists) does the agent pick devices
  itself: lowest free GPU index first, claims in (creation time, namespace/name) order.
A GPU is never given to two claims; a second existing claim on one GPU is reported as a conflict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from services.nodeagent.inventory import GpuProcess
from services.nodeagent.procmap import ContainerRef
from services.nodeagent.shares import ShareSpec
from shoal.core.kai_labels import RESERVE_GPU_ANNOTATION

RESERVE_ANNOTATION = RESERVE_GPU_ANNOTATION
FAKE_DEVICES_ANNOTATION = "shoal.io/gpu-devices"


@dataclass(frozen=True)
class Claim:
    pod_key: str
    created: str
    count: int
    existing: tuple[str, ...] = ()  # from the pod's annotation
    observed: tuple[str, ...] = ()  # from the node (device plugin env)


@dataclass(frozen=True)
class Conflict:
    pod_key: str
    gpu_uuid: str
    holder: str  # pod key that holds the GPU first, or "" when the GPU is not on this node


@dataclass(frozen=True)
class Assignment:
    devices: dict[str, tuple[str, ...]]  # pod key → GPUs held, for every claim that holds any
    new: dict[str, tuple[str, ...]]  # the subset to write as annotations now
    conflicts: tuple[Conflict, ...] = ()
    waiting: tuple[str, ...] = ()  # claims no GPU could be given to (yet)


def split_devices(value: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in value.split(",") if p.strip())


def assign_devices(gpu_uuids: Iterable[str], claims: Iterable[Claim], *, may_choose: bool) -> Assignment:
    order = list(gpu_uuids)  # by GPU index
    on_node = set(order)
    owner: dict[str, str] = {}
    devices: dict[str, tuple[str, ...]] = {}
    new: dict[str, tuple[str, ...]] = {}
    conflicts: list[Conflict] = []
    waiting: list[str] = []
    ordered = sorted(claims, key=lambda c: (c.created, c.pod_key))

    for claim in ordered:  # pass 1: the cluster's existing annotations
        if not claim.existing:
            continue
        held = []
        for gpu in claim.existing:
            if gpu not in on_node:
                conflicts.append(Conflict(claim.pod_key, gpu, ""))
            elif gpu in owner:
                conflicts.append(Conflict(claim.pod_key, gpu, owner[gpu]))
            else:
                owner[gpu] = claim.pod_key
                held.append(gpu)
        devices[claim.pod_key] = tuple(held)

    for claim in ordered:  # pass 2: what the node's device plugin gave (real mode)
        if claim.existing or not claim.observed:
            continue
        held = []
        for gpu in claim.observed:
            if gpu in owner or gpu not in on_node:
                conflicts.append(Conflict(claim.pod_key, gpu, owner.get(gpu, "")))
            else:
                owner[gpu] = claim.pod_key
                held.append(gpu)
        if held:
            devices[claim.pod_key] = tuple(held)
            new[claim.pod_key] = tuple(held)

    for claim in ordered:  # pass 3: choose (fake mode only)
        if claim.existing or claim.pod_key in devices:
            continue
        free = [g for g in order if g not in owner]
        if not may_choose or len(free) < claim.count or claim.count <= 0:
            waiting.append(claim.pod_key)
            continue
        chosen = tuple(free[: claim.count])
        for gpu in chosen:
            owner[gpu] = claim.pod_key
        devices[claim.pod_key] = chosen
        new[claim.pod_key] = chosen
    return Assignment(devices=devices, new=new, conflicts=tuple(conflicts), waiting=tuple(waiting))


@dataclass(frozen=True)
class ProcUsage:
    pid: int
    start_ticks: int
    used_mib: int | None


@dataclass
class PodUsage:
    pod_uid: str
    gpu_uuid: str
    used_mib: int = 0
    unknown: bool = False  # some process reported no memory figure: never kill on this
    processes: list[ProcUsage] = field(default_factory=list)
    sm_util_percent: int = 0


@dataclass(frozen=True)
class GpuBinding:
    """One shared GPU: its capacity (total minus any swap reserve) and the shares bound to it."""

    gpu_uuid: str
    capacity_mib: int
    shares: tuple[ShareSpec, ...]


@dataclass(frozen=True)
class Attribution:
    usage: dict[tuple[str, str], PodUsage]  # (pod uid, GPU uuid) → usage, only for bound shares
    foreign_mib: dict[str, int]  # GPU uuid → memory of processes of no share on that GPU


def attribute(
    processes: Iterable[GpuProcess],
    refs: Mapping[int, ContainerRef],
    bindings: Iterable[GpuBinding],
) -> Attribution:
    """Charge each GPU process to the share of its pod on that GPU; the rest is foreign (never killable)."""
    bound = {(s.pod_uid, b.gpu_uuid) for b in bindings for s in b.shares}
    usage: dict[tuple[str, str], PodUsage] = {key: PodUsage(key[0], key[1]) for key in bound}
    foreign: dict[str, int] = {}
    for proc in processes:
        ref = refs.get(proc.pid)
        key = (ref.pod_uid, proc.gpu_uuid) if ref is not None else None
        if key is None or key not in usage:
            foreign[proc.gpu_uuid] = foreign.get(proc.gpu_uuid, 0) + (proc.used_mib or 0)
            continue
        entry = usage[key]
        entry.used_mib += proc.used_mib or 0
        entry.unknown = entry.unknown or proc.used_mib is None
        entry.sm_util_percent += proc.sm_util_percent or 0
        entry.processes.append(ProcUsage(proc.pid, proc.start_ticks, proc.used_mib))
    return Attribution(usage=usage, foreign_mib=foreign)

"""GPU fractions (KAI §5.4): which shared GPU groups of a node a fractional pod takes.

Accounting is in milli-device: a group is one physical GPU with 1000 milli; a `gpu-fraction` f takes
f x 1000, a `gpu-memory` request takes ceil(mem x 1000 / node GPU memory) (same as f x node memory).
A group fits when its free portion (plus what its releasing pods give back) covers the request and the
group is not entirely releasing. Candidates on a node: every fitting existing group, plus one new group
per idle or releasing whole GPU.

Scoring (GpuOrderFn): gpupack (binpack) prefers the most used group, a new whole GPU scores 0;
gpuspread prefers the least used, a new whole GPU scores 1. Candidates that fit in idle come before
those that need releasing resources; ties go by group id. A multi-device fraction takes the first
`num_devices` candidates.

Compute modes (KAI v0.18): a group holds pods of one compute mode (`time-slicing`, the default, or
`sm-sharing`); a fraction only joins groups of its own mode, and a new group takes the mode of its first pod.
A group whose mode nothing states (no member, a reservation pod without the annotation) reads as
time-slicing, as KAI reads it.

New group ids are deterministic: derived from the node name, the pod uid and the device ordinal of
the request (unique because pod uids are unique, stable for the same snapshot).
"""

from __future__ import annotations

import hashlib

from shoal.core.session import DEVICE_MILLI, TIME_SLICING, GpuGroup, NodeState, Task
from shoal.core.statement import GroupPick


def new_group_id(node_name: str, pod_uid: str, ordinal: int) -> str:
    h = hashlib.sha256(f"{node_name}/{pod_uid}/{ordinal}".encode()).hexdigest()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def same_mode(group: GpuGroup, mode: str) -> bool:
    """A fraction of compute `mode` may join `group` (pods of two compute modes never share a GPU)."""
    return (group.mode or TIME_SLICING) == mode


def has_fitting_group(node: NodeState, share: int, mode: str = TIME_SLICING) -> bool:
    """gpusharingorder: the node already has a shared group this fraction fits in."""
    for g in node.groups.values():
        if (g.active_members > 0 or g.members == 0) and DEVICE_MILLI - g.used + g.releasing >= share \
                and same_mode(g, mode):
            return True
    return False


def fraction_fit(
    node: NodeState, share: int, devices: int, spread: bool, mode: str = TIME_SLICING
) -> tuple[int, bool, bool, int] | None:
    """Cheap twin of `pick_groups` for the node search, without building ids.

    Returns (new groups opened, pipelined, has an existing fitting group, free milli on the node's GPUs)
    or None when the fraction does not fit; follows exactly the candidate order of `pick_groups`.
    """
    if share > DEVICE_MILLI or share <= 0:
        return None
    e_idle = e_rel = 0
    free_milli = node.idle_gpus * DEVICE_MILLI
    for g in node.groups.values():
        free = DEVICE_MILLI - g.used
        free_milli += free
        if (g.members > 0 and g.active_members <= 0) or not same_mode(g, mode):
            continue
        if share <= free:
            if g.pipelined:
                e_rel += 1
            else:
                e_idle += 1
        elif share <= free + g.releasing:
            e_rel += 1
    idle_new = min(max(node.idle_gpus, 0), devices)
    rel_new = min(max(node.rel_gpus, 0), devices)
    if e_idle + e_rel + idle_new + rel_new < devices:
        return None
    need = devices
    new = 0
    pipelined = False
    for rel, existing, fresh in ((False, e_idle, idle_new), (True, e_rel, rel_new)):
        if need == 0:
            break
        first, second = (fresh, existing) if spread else (existing, fresh)
        a = min(first, need)
        need -= a
        b = min(second, need)
        need -= b
        new += a if spread else b
        if rel and (a or b):
            pipelined = True
    return new, pipelined, e_idle + e_rel > 0, free_milli


def pick_groups(node: NodeState, task: Task, strategy: str) -> tuple[list[GroupPick], bool] | None:
    """The groups a fraction takes on `node` and whether it must be pipelined; None if it does not fit."""
    share = task.device_milli(node)
    if share is None or share > DEVICE_MILLI or share <= 0:
        return None
    spread = strategy == "spread"
    cands: list[tuple[int, int, int, str, bool, bool]] = []  # (releasing, rank, kind, id, new, from_rel)
    for g in node.groups.values():
        if g.members > 0 and g.active_members <= 0:
            continue  # entirely releasing (a group kept only by its reservation pod is joinable)
        if not same_mode(g, task.compute_mode):
            continue
        free = DEVICE_MILLI - g.used
        if share <= free:
            rel = 1 if g.pipelined else 0
        elif share <= free + g.releasing:
            rel = 1
        else:
            continue
        rank = g.used if spread else -g.used
        cands.append((rel, rank, 0, g.id, False, False))
    need = task.devices
    idle_new = min(max(node.idle_gpus, 0), need)
    rel_new = min(max(node.rel_gpus, 0), need)
    for k in range(idle_new):
        cands.append((0, 0, 1, f"~{k:04d}", True, False))
    for k in range(rel_new):
        cands.append((1, 0, 1, f"~{k:04d}", True, True))
    if len(cands) < need:
        return None
    cands.sort()
    picks: list[GroupPick] = []
    pipelined = False
    ordinal = 0
    for rel, _rank, _kind, gid, new, from_rel in cands[:need]:
        if new:
            gid = new_group_id(node.name, task.pod.uid, ordinal)
            ordinal += 1
        picks.append(GroupPick(gid, new, from_rel))
        pipelined = pipelined or rel == 1
    return picks, pipelined


def portion_text(task: Task) -> str | None:
    """The BindRequest `receivedGPU.portion` ("%.2f") for a fraction, None for whole-GPU pods."""
    if not task.is_fraction:
        return None
    if task.frac_milli is not None:
        milli = task.frac_milli
    else:
        node = task.node
        mem = node.gpu_mem if node is not None and node.gpu_mem else None
        if mem is None or task.frac_mem is None:
            return None
        milli = -(-task.frac_mem * DEVICE_MILLI // mem)
    hundredths = (milli + 5) // 10
    return f"{hundredths // 100}.{hundredths % 100:02d}"


def received_memory_mib(task: Task) -> int | None:
    """The GPU memory (MiB per device) a placed fraction receives: its memory request, or its portion of the
    node's GPU memory rounded down (KAI's HamiCore/NvFractions arithmetic); None when the node has no label."""
    if task.frac_mem is not None:
        return task.frac_mem
    node = task.node
    if task.frac_milli is None or node is None or not node.gpu_mem:
        return None
    return node.gpu_mem * task.frac_milli // DEVICE_MILLI

"""Compute shares of a shared GPU per time-slicing plan, and their MPS actuation values (pure).

Run:ai's scheduler (gpu-sharing.md §1.3): each workload holds the whole GPU for leases of 250 ms;
precision 5 % gives a plan of 20 slots = 5 s. `strict`: a workload gets exactly its compute request
(slots it does not use stay idle). `fair`: every active workload first gets its request, then the
spare slots (including those of idle workloads) are divided equally among the active workloads, each
capped at its limit; a leftover single slot rotates with the plan number so no one is favoured.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from services.nodeagent.shares import ShareSpec

MODES = ("none", "strict", "fair")
DEFAULT_LEASE_MS = 250
DEFAULT_PRECISION = Fraction(5, 100)


@dataclass(frozen=True)
class SlicePlan:
    lease_ms: int
    n_slots: int
    per_pod: dict[str, int]  # pod key → slots per plan
    slots: tuple[str | None, ...]  # pod key holding each lease, None = idle

    @property
    def plan_ms(self) -> int:
        return self.lease_ms * self.n_slots

    def share(self, pod_key: str) -> Fraction:
        return Fraction(self.per_pod.get(pod_key, 0), self.n_slots)


def largest_remainder(wanted: Mapping[str, Fraction], total: int) -> dict[str, int]:
    """Integers proportional to `wanted`, summing to min(total, ceil(sum)), ties by key.

    Over-committed wants (sum above total) are first scaled down to the total.
    """
    whole = sum(wanted.values(), Fraction(0))
    if whole > total:
        wanted = {k: v * total / whole for k, v in wanted.items()}
    floors = {k: math.floor(v) for k, v in wanted.items()}
    target = min(total, math.ceil(sum(wanted.values(), Fraction(0))))
    rest = target - sum(floors.values())
    order = sorted(wanted, key=lambda k: (-(wanted[k] - floors[k]), k))
    for key in order[: max(0, rest)]:
        floors[key] += 1
    return floors


def _interleave(alloc: Mapping[str, int], n: int) -> tuple[str | None, ...]:
    """Smooth weighted round robin: spreads each pod's slots over the plan."""
    current = {k: 0 for k in alloc if alloc[k] > 0}
    total = sum(alloc.values())
    out: list[str | None] = []
    for _ in range(total):
        for key in current:
            current[key] += alloc[key]
        chosen = max(sorted(current), key=lambda k: current[k])
        current[chosen] -= total
        out.append(chosen)
    return tuple(out) + (None,) * (n - total)


def compute_plan(
    shares: Iterable[ShareSpec],
    mode: str,
    *,
    lease_ms: int = DEFAULT_LEASE_MS,
    precision: Fraction = DEFAULT_PRECISION,
    active: frozenset[str] | None = None,
    plan_no: int = 0,
) -> SlicePlan:
    """The plan for one GPU. `active`: pod keys that used the GPU in the last plan (None = all)."""
    if mode not in ("strict", "fair"):
        raise ValueError(f"time-slicing mode {mode!r} has no plan (strict or fair)")
    n = round(1 / precision)
    specs = {s.pod_key: s for s in shares}
    busy = set(specs) if active is None else set(active) & set(specs)
    base = largest_remainder({k: s.compute_request * n for k, s in specs.items()}, n)
    if mode == "strict":
        alloc = base
    else:
        alloc = {k: (base[k] if k in busy else 0) for k in specs}
        caps = {k: math.floor(specs[k].compute_limit * n) for k in specs}
        spare = n - sum(alloc.values())
        while spare > 0:
            open_keys = sorted(k for k in busy if alloc[k] < caps[k])
            if not open_keys:
                break
            if spare < len(open_keys):  # rotate leftover single slots
                start = plan_no % len(open_keys)
                open_keys = (open_keys[start:] + open_keys[:start])[:spare]
            for key in open_keys:
                alloc[key] += 1
                spare -= 1
    return SlicePlan(lease_ms=lease_ms, n_slots=n, per_pod=dict(sorted(alloc.items())), slots=_interleave(alloc, n))


def mps_env(share: ShareSpec, mode: str, *, device_ordinal: int = 0) -> dict[str, str]:
    """MPS client env for a share: memory limit = its memory limit; active threads = the compute request
    (strict, and the NVIDIA-default mode `none`, where MPS is a static spatial split) or the compute limit
    (fair, usually 100 %). A share without a compute request (`gpu-memory` pods) gets its limit."""
    compute = share.compute_request if mode != "fair" and share.compute_request > 0 else share.compute_limit
    percent = max(1, min(100, math.ceil(compute * 100)))
    return {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(percent),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"{device_ordinal}={share.mem_limit_mib}M",
    }

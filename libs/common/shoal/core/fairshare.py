"""Hierarchical fair share (KAI plugin `proportion`, reference §3.1, §3.2, §3.5).

`divide_fair_share(queues, total, k_value=1.0)` takes every queue's own figures and the shard's total
capacity and returns, per queue and resource, the effective deserved quota, the fair share, the rolled-up
allocated / non-preemptible / request amounts, the effective limit and the allocatable ("allowed") share.

Inputs (`QueueInput`):
- Per resource a `ShareResource(quota, limit, over_quota_weight)`, integer base units (millicores, bytes,
  milli-GPUs; ingest converts KAI's megabytes and GPUs). `quota` UNLIMITED (-1, or any negative) means
  "the parent's whole amount". `limit=None` means the manifest OMITTED it: Shoal's rule (SPEC §2.1)
  makes the effective limit equal to the quota (so an omitted limit on a quota -1 queue is unlimited);
  an explicit 0 is a cap of 0, UNLIMITED (-1, or any negative) no cap. A negative weight counts as 0.
- `request`, `allocated`, `allocated_non_preemptible`: the queue's OWN amounts (jobs directly in it;
  request = allocated + pending). They are rolled up here to every ancestor; outputs are rolled up.
- `usage`: historical usage per resource (0..1, time-based fair share); non-finite or negative -> 0.
- `creation_key`: sorts older first (e.g. the RFC3339 creationTimestamp); ties broken by name.
- `k_value`: KAI's kValue (default 1.0; <= 0 or non-finite -> 0).

Tree: queues with a missing parent (and their descendants) are dropped like KAI's cleanQueueOrphans;
parent cycles and duplicate names are dropped too (`queue_tree`). Top-level queues divide `total`;
children divide their parent's FAIR SHARE, recursively. Each level divides CPU, memory, then GPU
independently with `fairshare_division.divide_resource` (units and tie order documented there).

Outputs (`QueueShare`): `quota` is the raw quota (UNLIMITED kept; KAI's capacity checks, queue order and
status details use it); `deserved` is effective (UNLIMITED resolved to the amount the queue's level was
dividing: the parent's fair share, or `total` at the top); `allocatable` per §3.1: `limit` when the quota
is UNLIMITED (may itself be UNLIMITED), else `max(quota, fair_share)` capped by the limit unless unlimited.
Everything is deterministic and independent of the input order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction
from typing import NamedTuple

import msgspec

from shoal.core.fairshare_division import Claim, divide_resource
from shoal.core.queue_tree import DroppedQueue, QueueTree, build_tree
from shoal.core.resources import (
    BYTES_PER_MB,
    CPU,
    GPU,
    MEMORY,
    MILLI_PER_GPU,
    RESOURCE_ORDER,
    UNLIMITED,
    ZERO,
    Resources,
    from_values,
)

DEFAULT_QUEUE_PRIORITY = 100
DIVISION_UNIT = {CPU: 1, MEMORY: BYTES_PER_MB, GPU: MILLI_PER_GPU}


class ShareResource(NamedTuple):
    """One resource of a queue spec, in the resource's base unit."""

    quota: int = 0  # UNLIMITED (-1) = the parent's whole amount
    limit: int | None = None  # None = omitted -> limit = quota (Shoal); UNLIMITED = no cap; 0 = cap of 0
    over_quota_weight: float | int | Fraction = 1


class ShareUsage(NamedTuple):
    """Historical usage per resource, a fraction of capacity (0..1)."""

    cpu: float = 0.0
    memory: float = 0.0
    gpu: float = 0.0


class QueueInput(NamedTuple):
    name: str
    parent: str | None = None
    priority: int = DEFAULT_QUEUE_PRIORITY
    creation_key: str = ""
    cpu: ShareResource = ShareResource()
    memory: ShareResource = ShareResource()
    gpu: ShareResource = ShareResource()
    request: Resources = ZERO  # own: allocated + pending of jobs directly in this queue
    allocated: Resources = ZERO  # own
    allocated_non_preemptible: Resources = ZERO  # own
    usage: ShareUsage = ShareUsage()
    display_name: str = ""  # used in messages when set


class QueueShare(msgspec.Struct, frozen=True, gc=False):
    """The fair-share view of one queue; every vector is (cpu_milli, memory_bytes, gpu_milli)."""

    name: str
    parent: str | None
    children: tuple[str, ...]
    priority: int
    creation_key: str
    display_name: str
    quota: Resources  # raw; UNLIMITED components kept
    deserved: Resources  # effective; UNLIMITED resolved to the parent's amount
    fair_share: Resources
    allocated: Resources  # rolled up
    allocated_non_preemptible: Resources  # rolled up
    request: Resources  # rolled up: allocated + pending
    limit: Resources  # effective; UNLIMITED = no cap
    allocatable: Resources  # §3.1 allowed share; UNLIMITED possible (quota and limit unlimited)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def message_name(self) -> str:
        """The name KAI uses inside messages: displayName when set."""
        return self.display_name or self.name


class FairShareResult(NamedTuple):
    queues: dict[str, QueueShare]  # sorted by name
    dropped: tuple[DroppedQueue, ...]
    tree: QueueTree
    total: Resources
    k_value: float


def effective_limit(spec: ShareResource) -> int:
    """Shoal's limit: omitted -> quota; negative -> UNLIMITED."""
    limit = spec.quota if spec.limit is None else spec.limit
    return UNLIMITED if limit < 0 else limit


def allocatable_amount(quota: int, fair_share: int, limit: int) -> int:
    """KAI's GetAllocatableShare for one resource (§3.1)."""
    if quota < 0:
        return limit
    amount = max(quota, fair_share)
    return amount if limit < 0 else min(amount, limit)


def _clean(value: float | int | Fraction) -> float | int | Fraction:
    """A weight, usage or k: negative or non-finite values count as 0."""
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return value if value > 0 else 0


def divide_fair_share(
    queues: Iterable[QueueInput], total: Resources, k_value: float = 1.0
) -> FairShareResult:
    """Compute every queue's fair share (see the module docstring)."""
    inputs = sorted(queues, key=lambda q: (q.name, q.creation_key, q.parent or ""))
    tree = build_tree((q.name, q.parent) for q in inputs)
    by_name: dict[str, QueueInput] = {}
    for q in inputs:
        if q.name in tree.parents:
            by_name.setdefault(q.name, q)
    k = _clean(k_value)
    order = tree.top_down()

    request = {name: by_name[name].request for name in order}
    allocated = {name: by_name[name].allocated for name in order}
    non_preemptible = {name: by_name[name].allocated_non_preemptible for name in order}
    for name in reversed(order):
        parent = tree.parents[name]
        if parent is not None:
            request[parent] = request[parent] + request[name]
            allocated[parent] = allocated[parent] + allocated[name]
            non_preemptible[parent] = non_preemptible[parent] + non_preemptible[name]

    specs = {name: (by_name[name].cpu, by_name[name].memory, by_name[name].gpu) for name in order}
    quotas = {name: [UNLIMITED if s.quota < 0 else s.quota for s in specs[name]] for name in order}
    limits = {name: [effective_limit(s) for s in specs[name]] for name in order}
    weights = {name: [_clean(s.over_quota_weight) for s in specs[name]] for name in order}
    usages = {name: [_clean(u) for u in by_name[name].usage] for name in order}

    fair: dict[str, list[int]] = {}
    deserved: dict[str, list[int]] = {}
    top_amounts = tuple(max(amount, 0) for amount in total.values())
    groups: list[tuple[tuple[str, ...], tuple[int, ...]]] = [(tree.top_level(), top_amounts)]
    for siblings, amounts in groups:
        if not siblings:
            continue
        for name in siblings:
            fair[name] = [0, 0, 0]
            deserved[name] = [amounts[r] if quotas[name][r] < 0 else quotas[name][r] for r in range(3)]
        for r, resource in enumerate(RESOURCE_ORDER):
            claims = [
                Claim(
                    name=name,
                    creation_key=by_name[name].creation_key,
                    priority=by_name[name].priority,
                    quota=quotas[name][r],
                    limit=limits[name][r],
                    request=request[name].values()[r],
                    weight=weights[name][r],
                    usage=usages[name][r],
                )
                for name in siblings
            ]
            for name, amount in divide_resource(amounts[r], claims, DIVISION_UNIT[resource], k).items():
                fair[name][r] = amount
        for name in siblings:
            groups.append((tree.children[name], tuple(fair[name])))

    result: dict[str, QueueShare] = {}
    for name in tree.parents:
        q = by_name[name]
        quota = quotas[name]
        limit = limits[name]
        share = fair[name]
        result[name] = QueueShare(
            name=name,
            parent=tree.parents[name],
            children=tree.children[name],
            priority=q.priority,
            creation_key=q.creation_key,
            display_name=q.display_name,
            quota=from_values(quota),
            deserved=from_values(deserved[name]),
            fair_share=from_values(share),
            allocated=allocated[name],
            allocated_non_preemptible=non_preemptible[name],
            request=request[name],
            limit=from_values(limit),
            allocatable=from_values([allocatable_amount(quota[r], share[r], limit[r]) for r in range(3)]),
        )
    return FairShareResult(queues=result, dropped=tree.dropped, tree=tree, total=total, k_value=float(k))

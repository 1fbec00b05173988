"""DRF dominant share (§3.3) and the queue-order rules of §4.1, as pure functions over `QueueShare`.

The allocate / reclaim / preempt actions compare two candidate queues, each with the resources of the
job it would try next (`job`: the gang minimum, or one elastic task). `compare_queues` applies KAI's
eight rules in order; the single rules are exposed too so an action can compose its own order.

Comparisons with a bound treat UNLIMITED (-1) as +infinity (KAI's compareQuantities). Dominant shares
are exact `Fraction`s. The zero-allocatable penalty is KAI's `allocated x 1000` in KAI's units (GPUs,
millicores, bytes), i.e. `gpu_milli`, `cpu_milli x 1000`, `memory_bytes x 1000` here, so penalties rank
exactly as in KAI.

Rule 8 (KAI: older creationTimestamp first) breaks a tie of creation keys by queue name, so the order
is total and deterministic.

`record_allocation` updates the rolled-up allocated amounts of a queue and all its ancestors inside an
action's private copy of the shares (KAI's allocate/deallocate event handlers); fair shares, quotas and
allocatable shares do not change within a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from fractions import Fraction

import msgspec

from shoal.core.fairshare import QueueShare
from shoal.core.resources import ZERO, Resources

LEFT_FIRST = -1
RIGHT_FIRST = 1
EQUAL = 0

# allocated x 1000 in KAI units (millicores, bytes, GPUs), expressed on cpu_milli, memory_bytes, gpu_milli
_DRF_PENALTY = (1000, 1000, 1)


def _le_bounds(a: Resources, b: Resources) -> bool:
    """KAI LessEqual: a <= b in every resource, UNLIMITED (-1) being +infinity on either side."""
    for x, y in zip(a.values(), b.values(), strict=True):
        if x < 0:  # unlimited on the left is only <= unlimited
            if y >= 0:
                return False
        elif y >= 0 and x > y:
            return False
    return True


def dominant_share(share: QueueShare, total: Resources, allocated: Resources | None = None) -> Fraction:
    """max over resources of allocated / allocatable (§3.3); `allocated` defaults to the queue's own."""
    used = share.allocated if allocated is None else allocated
    best_num, best_den = 0, 1
    for amount, bound, cluster, penalty in zip(
        used.values(), share.allocatable.values(), total.values(), _DRF_PENALTY, strict=True
    ):
        if bound < 0:
            bound = cluster if cluster > 0 else 0
        num, den = (amount * penalty, 1) if bound == 0 else (amount, bound)
        if num * best_den > best_num * den:
            best_num, best_den = num, den
    return Fraction(best_num, best_den)


def dominant_share_with_job(
    share: QueueShare, total: Resources, job: Resources, victims: Resources = ZERO
) -> Fraction:
    """Dominant share counting the job, after removing the victims' resources (rule 5)."""
    return dominant_share(share, total, share.allocated + job - victims)


def is_over_utilised(share: QueueShare) -> bool:
    """Rule 1: fair share < allocated in EVERY resource."""
    return (
        share.fair_share.cpu_milli < share.allocated.cpu_milli
        and share.fair_share.memory_bytes < share.allocated.memory_bytes
        and share.fair_share.gpu_milli < share.allocated.gpu_milli
    )


def is_within_deserved(share: QueueShare, job: Resources) -> bool:
    """Rule 2: allocated + job <= raw quota in every resource (UNLIMITED quota always holds)."""
    return _le_bounds(share.allocated + job, share.quota)


def uses_zero_allocatable(share: QueueShare, job: Resources) -> bool:
    """Rule 4: with the job, the queue would hold > 0 of a resource whose allocatable share is 0."""
    with_job = share.allocated + job
    return any(
        bound == 0 and amount > 0
        for amount, bound in zip(with_job.values(), share.allocatable.values(), strict=True)
    )


def has_smaller_allocatable(left: QueueShare, right: QueueShare) -> bool:
    """Rule 7: left's allocatable share is <= right's in all resources and < in at least one."""
    a, b = left.allocatable, right.allocatable
    return _le_bounds(a, b) and not _le_bounds(b, a)


def _prefer(left_good: bool, right_good: bool) -> int:
    if left_good and not right_good:
        return LEFT_FIRST
    if right_good and not left_good:
        return RIGHT_FIRST
    return EQUAL


def _smaller(left: Fraction, right: Fraction) -> int:
    if left < right:
        return LEFT_FIRST
    if left > right:
        return RIGHT_FIRST
    return EQUAL


def compare_queues(
    left: QueueShare,
    right: QueueShare,
    left_job: Resources,
    right_job: Resources,
    total: Resources,
    left_victims: Resources = ZERO,
    right_victims: Resources = ZERO,
) -> int:
    """KAI's eight queue-order rules; LEFT_FIRST (-1) or RIGHT_FIRST (1), EQUAL only for one queue."""
    result = _prefer(not is_over_utilised(left), not is_over_utilised(right))
    if result:
        return result
    result = _prefer(is_within_deserved(left, left_job), is_within_deserved(right, right_job))
    if result:
        return result
    if left.priority != right.priority:
        return LEFT_FIRST if left.priority > right.priority else RIGHT_FIRST
    result = _prefer(not uses_zero_allocatable(left, left_job), not uses_zero_allocatable(right, right_job))
    if result:
        return result
    result = _smaller(
        dominant_share_with_job(left, total, left_job, left_victims),
        dominant_share_with_job(right, total, right_job, right_victims),
    )
    if result:
        return result
    result = _smaller(dominant_share(left, total), dominant_share(right, total))
    if result:
        return result
    result = _prefer(has_smaller_allocatable(left, right), has_smaller_allocatable(right, left))
    if result:
        return result
    left_key, right_key = (left.creation_key, left.name), (right.creation_key, right.name)
    if left_key == right_key:
        return EQUAL
    return LEFT_FIRST if left_key < right_key else RIGHT_FIRST


def record_allocation(
    shares: MutableMapping[str, QueueShare], queue: str, delta: Resources, non_preemptible: bool
) -> None:
    """Add `delta` (negative to release) to `allocated` of the queue and every ancestor, in place."""
    name: str | None = queue
    while name is not None and name in shares:
        share = shares[name]
        if non_preemptible:
            share = msgspec.structs.replace(
                share,
                allocated=share.allocated + delta,
                allocated_non_preemptible=share.allocated_non_preemptible + delta,
            )
        else:
            share = msgspec.structs.replace(share, allocated=share.allocated + delta)
        shares[name] = share
        name = share.parent


def record_non_preemptible(shares: MutableMapping[str, QueueShare], queue: str, delta: Resources) -> None:
    """Add `delta` to `allocated_non_preemptible` alone of the queue and every ancestor (a semi-preemptible
    job's core grew or shrank; its allocated amounts were recorded with the placements)."""
    name: str | None = queue
    while name is not None and name in shares:
        share = shares[name]
        shares[name] = share = msgspec.structs.replace(
            share, allocated_non_preemptible=share.allocated_non_preemptible + delta)
        name = share.parent


def queue_path(shares: Mapping[str, QueueShare], queue: str) -> tuple[QueueShare, ...]:
    """The queue then its ancestors up to the top level (empty when the queue is unknown)."""
    path: list[QueueShare] = []
    name: str | None = queue
    while name is not None and name in shares and len(path) <= len(shares):
        share = shares[name]
        path.append(share)
        name = share.parent
    return tuple(path)

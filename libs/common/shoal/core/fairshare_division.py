"""Dividing one resource among sibling queues (KAI `resource_division`, reference §3.2 and §3.5).

`divide_resource(total, claims, unit, k_value)` returns each sibling's fair share, in the resource's base
integer unit (millicores, bytes, milli-GPUs). The phases are KAI's:

1. Deserved: every sibling gets `min(deserved, requestable)`, queue priority ignored; a quota of
   UNLIMITED (-1) means the whole `total`. If nothing is left, stop (oversubscribed quotas simply add up
   to more than `total`).
2. Over-quota, by strict priority buckets (higher `priority` first): water-filling. Each round, every
   unsatisfied sibling with a non-zero weight gets `pot * s / S` where
   `nw = weight / (sum of the weights of the unsatisfied)` and `s = max(0, nw + k*(nw - usage))`
   (time-based fair share; usage 0 gives `s = nw*(1+k)`). A sibling that wants no more than its share
   gets exactly what it wants; otherwise it gets its share floored to whole `unit`s and the floored-away
   remainder is remembered. Another round runs while someone wanted less than its share.
3. Leftovers: what the floors left behind is handed out one `unit` at a time, bucket by bucket (priority
   desc), to the siblings with a remembered remainder ordered by (remainder desc, creation key asc, name
   asc).

Units: GPU water-fills in whole GPUs (unit 1000 milli-GPU), CPU in millicores (unit 1), memory in
megabytes (unit 10^6 bytes). Arithmetic is exact (`fractions.Fraction`), so there is no float drift and
no dependence on iteration order; siblings are always visited in (creation key, name) order, which is
also the tie order. KAI iterates a Go map instead.

Deliberate differences from KAI (Shoal never hands a queue more than it can use):
- A priority bucket with a single queue gets `min(remaining, requestable - fair)` (KAI gives it all that
  remains, beyond its request and limit). Like KAI, its weight is not consulted.
- A leftover unit is capped by what the queue still wants (`requestable - fair`).
So a fair share is never above `requestable = min(limit, request)` (limit UNLIMITED: request).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from math import floor
from typing import NamedTuple

_ZERO = Fraction(0)


class Claim(NamedTuple):
    """One sibling's view of one resource, in the resource's base unit."""

    name: str
    creation_key: str
    priority: int
    quota: int  # deserved; negative = UNLIMITED (the whole total)
    limit: int  # effective limit; negative = UNLIMITED
    request: int  # allocated + pending, rolled up over the subtree
    weight: Fraction  # over-quota weight (>= 0)
    usage: Fraction  # historical usage, normally 0..1


def requestable(claim: Claim) -> int:
    """`min(limit, request)`, or `request` when the limit is UNLIMITED; never negative."""
    amount = claim.request if claim.limit < 0 else min(claim.limit, claim.request)
    return amount if amount > 0 else 0


def divide_resource(total: int, claims: Sequence[Claim], unit: int, k_value: Fraction) -> dict[str, int]:
    """Fair share per sibling name for one resource (see the module docstring)."""
    ordered = sorted(claims, key=lambda c: (c.creation_key, c.name))
    wants = [requestable(c) for c in ordered]
    fair = [0] * len(ordered)
    total = max(total, 0)
    remaining = total
    for i, claim in enumerate(ordered):
        deserved = total if claim.quota < 0 else claim.quota
        give = min(deserved, wants[i])
        fair[i] = give
        remaining -= give
    if remaining > 0:
        k = k_value if k_value > 0 else _ZERO
        buckets: dict[int, list[int]] = {}
        for i, claim in enumerate(ordered):
            buckets.setdefault(claim.priority, []).append(i)
        leftovers: list[dict[int, Fraction]] = []
        for priority in sorted(buckets, reverse=True):
            remaining, left = _water_fill(buckets[priority], remaining, ordered, wants, fair, unit, k)
            leftovers.append(left)
        for left in leftovers:
            if remaining <= 0:
                break
            turn = sorted(left, key=lambda i: (-left[i], ordered[i].creation_key, ordered[i].name))
            for i in turn:
                if remaining <= 0:
                    break
                give = min(unit, remaining, wants[i] - fair[i])
                if give > 0:
                    fair[i] += give
                    remaining -= give
    return {claim.name: fair[i] for i, claim in enumerate(ordered)}


def _water_fill(
    bucket: list[int],
    remaining: int,
    claims: list[Claim],
    wants: list[int],
    fair: list[int],
    unit: int,
    k: Fraction,
) -> tuple[int, dict[int, Fraction]]:
    """Phase 2 for one priority bucket; updates `fair` in place, returns (remaining, leftovers)."""
    left: dict[int, Fraction] = {}
    if len(bucket) == 1:
        i = bucket[0]
        give = min(remaining, max(wants[i] - fair[i], 0))
        fair[i] += give
        return remaining - give, left
    while True:
        active = [i for i in bucket if wants[i] > fair[i]]
        weight_sum = sum((claims[i].weight for i in active), _ZERO)
        if weight_sum == 0:
            break
        shares: list[Fraction] = []
        for i in active:
            nw = claims[i].weight / weight_sum
            s = nw + k * (nw - claims[i].usage)
            shares.append(s if s > 0 else _ZERO)
        share_sum = sum(shares, _ZERO)
        if share_sum == 0:
            break
        pot = remaining
        again = False
        for i, s in zip(active, shares, strict=True):
            if remaining == 0:
                break
            if claims[i].weight == 0:
                continue
            want = wants[i] - fair[i]
            share = pot * s / share_sum
            if want <= share:
                give = want
                left.pop(i, None)
            else:
                give = floor(share / unit) * unit
                if share > give:
                    left[i] = share - give
            if give == 0:
                continue
            fair[i] += give
            remaining -= give
            again = again or want < share
        if not again or remaining == 0:
            break
    return remaining, left

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
megabytes (unit 10^6 bytes). Arithmetic is exact (weights, usages and k are taken as exact rationals
and scaled to integers over a common denominator), so there is no float drift and no dependence on
iteration order; siblings are always visited in (creation key, name) order, which is
also the tie order. KAI iterates a Go map instead.

This follows KAI's current `resource_division.go` (older releases handed a priority bucket holding a
single queue everything that remained, whatever its weight, request or limit; current KAI does not).
One deliberate difference: a leftover unit is capped by what the queue still wants
(`requestable - fair`; KAI hands out a whole unit even when the queue wants only part of it), so a fair
share is never above `requestable = min(limit, request)` (limit UNLIMITED: request).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import NamedTuple


class Claim(NamedTuple):
    """One sibling's view of one resource, in the resource's base unit."""

    name: str
    creation_key: str
    priority: int
    quota: int  # deserved; negative = UNLIMITED (the whole total)
    limit: int  # effective limit; negative = UNLIMITED
    request: int  # allocated + pending, rolled up over the subtree
    weight: int | float | Fraction  # over-quota weight; negative or non-finite counts as 0
    usage: int | float | Fraction  # historical usage, normally 0..1; negative or non-finite counts as 0


def requestable(claim: Claim) -> int:
    """`min(limit, request)`, or `request` when the limit is UNLIMITED; never negative."""
    amount = claim.request if claim.limit < 0 else min(claim.limit, claim.request)
    return amount if amount > 0 else 0


def _ratio(value: int | float | Fraction) -> tuple[int, int]:
    """(numerator, denominator) of a non-negative finite number; anything else counts as 0."""
    if isinstance(value, float) and not math.isfinite(value):
        return (0, 1)
    if value <= 0:
        return (0, 1)
    return value.as_integer_ratio()


def divide_resource(
    total: int, claims: Sequence[Claim], unit: int, k_value: int | float | Fraction
) -> dict[str, int]:
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
        weights = _common_scale([_ratio(c.weight) for c in ordered])
        usages = _common_scale([_ratio(c.usage) for c in ordered])
        fill = _Fill(ordered, wants, fair, weights, usages, unit, _ratio(k_value))
        buckets: dict[int, list[int]] = {}
        for i, claim in enumerate(ordered):
            buckets.setdefault(claim.priority, []).append(i)
        leftovers: list[dict[int, Fraction]] = []
        for priority in sorted(buckets, reverse=True):
            remaining, left = fill.water_fill(buckets[priority], remaining)
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


def _common_scale(ratios: list[tuple[int, int]]) -> tuple[list[int], int]:
    """Numerators over one common denominator, and that denominator."""
    denominator = math.lcm(*(d for _, d in ratios)) if ratios else 1
    return [n * (denominator // d) for n, d in ratios], denominator


class _Fill:
    """Phase 2 in exact integer arithmetic.

    With weights a_i/Dw, usages b_i/Du and k = kc/kd, multiplying KAI's share weight
    s_i = (a_i/A)(1 + k) - k*b_i/Du by the positive A*kd*Du gives the integer
    a_i*(kd + kc)*Du - kc*b_i*A with the same ratios (A: the active siblings' weight sum).
    """

    def __init__(
        self,
        claims: list[Claim],
        wants: list[int],
        fair: list[int],
        weights: tuple[list[int], int],
        usages: tuple[list[int], int],
        unit: int,
        k: tuple[int, int],
    ) -> None:
        self.claims = claims
        self.wants = wants
        self.fair = fair
        self.weights = weights[0]
        self.usages, usage_scale = usages
        kc, kd = k
        self.weight_factor = (kd + kc) * usage_scale
        self.usage_factor = kc
        self.unit = unit

    def water_fill(self, bucket: list[int], remaining: int) -> tuple[int, dict[int, Fraction]]:
        """One priority bucket; updates `fair` in place, returns (remaining, leftovers)."""
        wants, fair, weights, unit = self.wants, self.fair, self.weights, self.unit
        left: dict[int, Fraction] = {}
        while True:
            active = [i for i in bucket if wants[i] > fair[i]]
            weight_sum = sum(weights[i] for i in active)
            if weight_sum == 0:
                break
            shares = []
            for i in active:
                s = weights[i] * self.weight_factor - self.usage_factor * self.usages[i] * weight_sum
                shares.append(s if s > 0 else 0)
            share_sum = sum(shares)
            if share_sum == 0:
                break
            pot = remaining
            again = False
            for i, s in zip(active, shares, strict=True):
                if remaining == 0:
                    break
                if weights[i] == 0:
                    continue
                want = wants[i] - fair[i]
                share_num = pot * s  # this sibling's share is share_num / share_sum
                if want * share_sum <= share_num:
                    give = want
                    left.pop(i, None)
                else:
                    give = share_num // (share_sum * unit) * unit
                    remainder = share_num - give * share_sum
                    if remainder > 0:
                        left[i] = Fraction(remainder, share_sum)
                if give == 0:
                    continue
                fair[i] += give
                remaining -= give
                again = again or want * share_sum < share_num
            if not again or remaining == 0:
                break
        return remaining, left

"""Reclaim rules between queues (KAI §4.4, plugin proportion/reclaimable) plus Shoal's two guarantees.

All figures are (cpu_milli, memory_bytes, gpu_milli). `before` holds every queue's rolled-up allocation
when the reclaimer's search starts; "after" is the session's live allocation inside the simulated
scenario (victims evicted, reclaimer placed). Deserved, fair share and allocatable come from the
cycle's fair-share division.

- Eligibility (`can_reclaim`): the reclaimer's leaf queue stays within its fair share with the job.
- Leveling: reclaimer and victim queues are compared at the first level where their paths from the
  root diverge (`leveled`).
- Victim filter (`victim_allowed`): when the reclaimer's level queue would be over deserved quota,
  the victim's level queue must be over its allocatable (fair) share; otherwise it must be over deserved
  in a resource the reclaimer asks for.
- Scenario (`scenario_ok`), per victim level queue, chunk by chunk: MaintainFairShare (the victim
  queue is still above its allocatable share before the chunk) or GuaranteeDeservedQuota (the reclaimer
  stays within deserved and the victim queue is above deserved before the chunk). Then KAI's saturation
  bound: a reclaimer ending above its fair share must end less saturated (x multiplier) than each
  victim sibling.
- Shoal (SPEC §2.4), in the resources the reclaimer asks for: (a) no queue on the reclaimer's path up to
  the divergence level ends above its allocatable share, so reclaim reaches fair share and stops there;
  (b) where a reclaimer level queue ends above deserved in a resource, it may not take the victim
  queue below min(its allocation, its deserved) in that same resource; (c) below the divergence level,
  no queue on the victim's path is taken below min(its allocation, its fair share) in a resource while a
  sibling ends above its own fair share there (`_inner_ok`). Together they make a reclaim final: right
  after it, the victims' queues can claim nothing back from the reclaimer (no ping-pong).
- Deserved quota in these checks is KAI's: a resource whose quota is UNLIMITED (-1) is never "over
  deserved" and is skipped (`deserved`); fair share and allocatable are the division's.

Eviction message (`reclaim_message`): "Pod ns/p was preempted by workload ns/<pg>." then, one per line,
the victim's and the reclaimer's queue at the divergence level: "<queue> uses <alloc> with a quota of
<deserved>, fair-share of <fair> and queue priority of <prio>." Amounts are rendered for the resources
the reclaimer asks for, GPU first, then CPU and memory, joined by ", ": "4 GPUs", "0.5 CPU cores",
"1.61 GB memory" (capacity.humanize: truncated to 3 decimals; an unlimited quota reads "Unlimited
GPUs"). <alloc> is the queue's allocation when the reclaimer's search starts; <deserved> its raw quota;
<fair> its fair share; the queue's displayName is used when set.
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal.core.capacity import humanize
from shoal.core.fairshare import QueueShare
from shoal.core.resources import CPU, GPU, MEMORY, RESOURCE_ORDER, UNLIMITED, Resources
from shoal.core.session import Session
from shoal.core.victims import Chunk


def allocations(session: Session) -> dict[str, Resources]:
    return {name: Resources(*qs.alloc) for name, qs in session.queues.items()}


def path_down(shares: Mapping[str, QueueShare], name: str) -> list[str]:
    """Root first, the queue last."""
    out: list[str] = []
    cur: str | None = name
    while cur is not None and cur in shares and len(out) <= len(shares):
        out.append(cur)
        cur = shares[cur].parent
    out.reverse()
    return out


def leveled(shares: Mapping[str, QueueShare], reclaimer: str, victim: str) -> tuple[str, str] | None:
    """The reclaimer's and the victim's queues at the level where their paths diverge."""
    a, b = path_down(shares, reclaimer), path_down(shares, victim)
    for x, y in zip(a, b, strict=False):
        if x != y:
            return x, y
    return None


def _over(amount: Resources, bound: Resources, only: tuple[bool, bool, bool] = (True, True, True)) -> bool:
    """amount > bound in some (selected) resource; a negative bound is unlimited."""
    return _over_values(amount.values(), bound.values(), only)


def deserved(share: QueueShare) -> Resources:
    """The deserved quota for the reclaim checks: an UNLIMITED (-1) quota stays unlimited, so the
    resource is skipped by every "over deserved" test (KAI), not resolved to the parent's amount."""
    q, d = share.quota.values(), share.deserved.values()
    return Resources(*(UNLIMITED if qv < 0 else dv for qv, dv in zip(q, d, strict=True)))


def _over_values(amount: list[int] | tuple[int, ...], bound: tuple[int, int, int],
                 only: tuple[bool, bool, bool] = (True, True, True)) -> bool:
    """`_over` on plain (cpu, memory, gpu) values (the per-chunk loop of `scenario_ok` keeps lists)."""
    return ((only[0] and bound[0] >= 0 and amount[0] > bound[0])
            or (only[1] and bound[1] >= 0 and amount[1] > bound[1])
            or (only[2] and bound[2] >= 0 and amount[2] > bound[2]))


def requested_mask(request: Resources) -> tuple[bool, bool, bool]:
    return tuple(v > 0 for v in request.values())  # type: ignore[return-value]


def can_reclaim(shares: Mapping[str, QueueShare], before: Mapping[str, Resources], queue: str,
                request: Resources) -> bool:
    share = shares[queue]
    return not _over(before[queue] + request, share.fair_share)


def victim_allowed(shares: Mapping[str, QueueShare], before: Mapping[str, Resources], level: tuple[str, str],
                   request: Resources) -> bool:
    r_name, v_name = level
    r, v = shares[r_name], shares[v_name]
    if _over(before[r_name] + request, deserved(r)):
        return _over(before[v_name], v.allocatable)
    return _over(before[v_name], deserved(v), requested_mask(request))


def scenario_ok(shares: Mapping[str, QueueShare], before: Mapping[str, Resources], after: Mapping[str, Resources],
                reclaimer: str, request: Resources, chunks: list[Chunk], multiplier: float) -> bool:
    mask = requested_mask(request)
    remaining: dict[str, list[int]] = {}
    levels: dict[str, str] = {}
    seen: dict[str, tuple[str, str, bool, Resources] | None] = {}
    for chunk in chunks:
        queue = chunk.job.queue
        if queue not in seen:
            level = leveled(shares, reclaimer, queue)
            if level is None:
                seen[queue] = None
            else:
                r_name, v_name = level
                r_within = not _over(before[r_name] + request, deserved(shares[r_name]))
                seen[queue] = (r_name, v_name, r_within, deserved(shares[v_name]))
        got = seen[queue]
        if got is None:
            return False
        r_name, v_name, r_within, v_deserved = got
        levels[v_name] = r_name
        left = remaining.get(v_name)
        if left is None:
            left = remaining[v_name] = list(before[v_name].values())
        if not (_over_values(left, shares[v_name].allocatable.values())
                or (r_within and _over_values(left, v_deserved.values()))):
            return False  # neither MaintainFairShare nor GuaranteeDeservedQuota
        freed = chunk.resources
        left[0] -= freed.cpu_milli
        left[1] -= freed.memory_bytes
        left[2] -= freed.gpu_milli
    path = path_down(shares, reclaimer)
    for v_name, r_name in sorted(levels.items()):
        r, v = shares[r_name], shares[v_name]
        for name in path[path.index(r_name):]:
            if _over(after[name], shares[name].allocatable, mask):
                return False
        if not _keeps_floor(deserved(r), deserved(v), before[v_name], after[r_name], after[v_name], mask):
            return False
        if not _saturation_ok(r, v, after[r_name], after[v_name], mask, multiplier):
            return False
    for leaf in sorted({c.job.queue for c in chunks}):
        if not _inner_ok(shares, before, after, levels, leaf, mask):
            return False
    return True


def _inner_ok(shares: Mapping[str, QueueShare], before: Mapping[str, Resources], after: Mapping[str, Resources],
              levels: Mapping[str, str], leaf: str, mask: tuple[bool, bool, bool]) -> bool:
    """Guard (c), below the divergence level: no queue on the victim's path is taken below
    min(what it had, its fair share) in a resource while a sibling of it ends above its own fair share
    there (it would reclaim from that sibling in the next cycle: ping-pong inside a department)."""
    path = path_down(shares, leaf)
    inner = next((i for i, name in enumerate(path) if name in levels), None)
    if inner is None:
        return True
    for name in path[inner + 1:]:
        share = shares[name]
        floor = before[name].minimum(share.fair_share)
        if not _over(floor, after[name], mask):
            continue
        low = [f > a for f, a, sel in zip(floor.values(), after[name].values(), mask, strict=True)]
        parent = shares.get(share.parent) if share.parent is not None else None
        for sib in parent.children if parent is not None else ():
            if sib == name or sib not in after:
                continue
            fair = shares[sib].fair_share.values()
            if any(lo and a > f for lo, a, f in zip(low, after[sib].values(), fair, strict=True)):
                return False
    return True


def _keeps_floor(r_deserved: Resources, v_deserved: Resources, v_before: Resources, r_after: Resources,
                 v_after: Resources, mask: tuple[bool, bool, bool]) -> bool:
    """Guard (b), resource by resource: where the reclaimer ends above its deserved quota, the victim
    queue keeps at least min(what it had, its deserved) of that same resource (an unlimited deserved
    is skipped, as in KAI's deserved checks)."""
    for i, sel in enumerate(mask):
        rd, vd = r_deserved.values()[i], v_deserved.values()[i]
        if not sel or rd < 0 or vd < 0 or r_after.values()[i] <= rd:
            continue
        if v_after.values()[i] < min(v_before.values()[i], vd):
            return False
    return True


def _saturation_ok(r: QueueShare, v: QueueShare, r_after: Resources, v_after: Resources,
                   mask: tuple[bool, bool, bool], multiplier: float) -> bool:
    for i, sel in enumerate(mask):
        if not sel:
            continue
        r_fair, v_fair = r.fair_share.values()[i], v.fair_share.values()[i]
        r_alloc, v_alloc = r_after.values()[i], v_after.values()[i]
        if v_fair <= 0:
            continue
        # ratio_r > 1  and  ratio_r * m >= ratio_v, cross-multiplied (r_fair may be 0: ratio infinite)
        if r_fair == 0:
            if r_alloc > 0:
                return False
            continue
        if r_alloc > r_fair and r_alloc * multiplier * v_fair >= v_alloc * r_fair:
            return False
    return True


_UNITS = {GPU: "GPUs", CPU: "CPU cores", MEMORY: "GB memory"}


def render(amount: Resources, mask: tuple[bool, bool, bool]) -> str:
    """Amounts for the queue lines: GPU first, then CPU and memory, only the resources in `mask`."""
    parts = []
    for resource in (GPU, CPU, MEMORY):
        if mask[RESOURCE_ORDER.index(resource)]:
            parts.append(f"{humanize(resource, amount.get(resource))} {_UNITS[resource]}")
    return ", ".join(parts) if parts else f"{humanize(GPU, amount.gpu_milli)} GPUs"


def queue_line(share: QueueShare, allocated: Resources, mask: tuple[bool, bool, bool]) -> str:
    return (
        f"{share.message_name} uses {render(allocated, mask)} with a quota of {render(share.quota, mask)}, "
        f"fair-share of {render(share.fair_share, mask)} and queue priority of {share.priority}."
    )


def reclaim_message(pod_key: str, reclaimer_pg: str, victim_line: str, reclaimer_line: str) -> str:
    return f"Pod {pod_key} was preempted by workload {reclaimer_pg}.\n{victim_line}\n{reclaimer_line}"

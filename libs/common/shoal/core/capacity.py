"""Queue capacity checks (KAI `capacity_policy`, reference §3.4) with KAI's reasons and message texts.

`check_capacity(shares, queue, requested, non_preemptible)` runs, like KAI's IsJobOverQueueCapacity:
1. `OverLimit`: for the leaf queue, then each ancestor up to the top; within a queue for CPU, memory,
   GPU: fails when the effective limit is not UNLIMITED, the request for that resource is > 0 and
   `limit < allocated + requested`. The first failing queue and resource is reported.
2. `NonPreemptibleOverQuota` (non-preemptible jobs only): same walk; fails when the raw quota is not
   UNLIMITED, the request is > 0 and `quota < allocated_non_preemptible + requested`.
It returns `None` when the job fits, else a `CapacityVerdict(reason, message, details)`; it never
raises. An unknown queue gives the `QueueDoesNotExist` verdict. `requested` is what is being placed now
(the gang minimum, or one elastic task), in base units. Messages carry no trailing period (KAI's
condition text appends "."); the queue's displayName is used in them when set.

Number formatting is KAI's `HumanizeResource`: the value in display units (GPUs; cores = millicores /
1000; GB = bytes / 10^9) printed with 6 decimals, TRUNCATED to 3 decimals, trailing zeros and dot
removed ("0", "0.5", "0.1" cores for 100m, "1.61" GB for 1.5 GiB); UNLIMITED prints "Unlimited". The
GPU amount a non-preemptible workload requested is printed like Go's `%v` (shortest form: "1", "0.5").

`details` mirrors `details.queueDetails`: `name` (the queue's metadata name) and Resources vectors for
`queueRequestedResources`, `queueDeservedResources` (raw quota, UNLIMITED kept as KAI does),
`queueAllocatedResources`, `queueAllocatedNonPreemptibleResources`, `queueResourceLimits` (effective
limit), `podGroupRequestedResources`, `podGroupRequestedNonPreemptibleResources`; rendering them as
Kubernetes ResourceLists is the caller's job.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import NamedTuple

from shoal.core.fairshare import QueueShare
from shoal.core.plan import QueueDetails
from shoal.core.queue_order import queue_path
from shoal.core.resources import CPU, GPU, MEMORY, RESOURCE_ORDER, UNLIMITED, ZERO, Resources

OVER_LIMIT = "OverLimit"
NON_PREEMPTIBLE_OVER_QUOTA = "NonPreemptibleOverQuota"
QUEUE_DOES_NOT_EXIST = "QueueDoesNotExist"

_DISPLAY_DIVISOR = {CPU: 1000, MEMORY: 1_000_000_000, GPU: 1000}


class CapacityVerdict(NamedTuple):
    reason: str
    message: str
    details: QueueDetails | None  # None: no queue to show (QueueDoesNotExist)


def humanize(resource: str, amount: int) -> str:
    """KAI HumanizeResource of a base-unit amount (see the module docstring)."""
    if amount == UNLIMITED:
        return "Unlimited"
    text = "%.6f" % (amount / _DISPLAY_DIVISOR[resource])
    whole, _, decimals = text.partition(".")
    decimals = decimals[:3].rstrip("0")
    return f"{whole}.{decimals}" if decimals else whole


def go_float(value: float) -> str:
    """Go's `%v` of a float64: shortest digits, exponent form when exp < -4 or exp >= 6."""
    if value == 0:
        return "0"
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    if not isinstance(exponent, int):  # pragma: no cover - finite values always have an int exponent
        return repr(value)
    point = len(digit_tuple) + exponent  # position of the decimal point in `digits`
    prefix = "-" if sign else ""
    exp10 = point - 1
    if exp10 < -4 or exp10 >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{prefix}{mantissa}e{'+' if exp10 >= 0 else '-'}{abs(exp10):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return prefix + digits + "0" * (point - len(digits))
    return f"{prefix}{digits[:point]}.{digits[point:]}"


def over_limit_message(queue_name: str, resource: str, limit: int, allocated: int, requested: int) -> str:
    what, unit = {GPU: ("GPUs", "GPUs"), CPU: ("CPU cores", "cores"), MEMORY: ("memory", "GB")}[resource]
    return (
        f"{queue_name} quota has reached the allowable limit of {what}. "
        f"Limit is {humanize(resource, limit)} {unit}, "
        f"currently {humanize(resource, allocated)} {unit} allocated and "
        f"workload requested {humanize(resource, requested)} {unit}"
    )


def non_preemptible_over_quota_message(
    queue_name: str, resource: str, quota: int, allocated_non_preemptible: int, requested: int
) -> str:
    quota_text = humanize(resource, quota)
    used_text = humanize(resource, allocated_non_preemptible)
    if resource == GPU:
        detail = (
            f"Workload requested {go_float(requested / 1000)} GPUs, but {queue_name} quota is {quota_text} "
            f"GPUs, while {used_text} GPUs are already allocated for non-preemptible pods."
        )
    elif resource == CPU:
        detail = (
            f"Workload requested {humanize(CPU, requested)} CPU cores, but {queue_name} quota is "
            f"{quota_text} cores, while {used_text} cores are already allocated for non-preemptible pods."
        )
    else:
        detail = (
            f"Workload requested {humanize(MEMORY, requested)} GB memory, but {queue_name} quota is "
            f"{quota_text} GB, while {used_text} GB are already allocated for non-preemptible pods."
        )
    return f"Non-preemptible workload is over quota. {detail} Use a preemptible workload to go over quota."


def queue_does_not_exist_message(name: str) -> str:
    return f"Queue '{name}' does not exist"


def queue_does_not_exist(name: str) -> CapacityVerdict:
    return CapacityVerdict(QUEUE_DOES_NOT_EXIST, queue_does_not_exist_message(name), None)


def vector(r: Resources) -> tuple[int, int, int]:
    """(cpu_milli, memory_bytes, gpu_milli), as QueueDetails holds them."""
    return (r.cpu_milli, r.memory_bytes, r.gpu_milli)


def queue_details(share: QueueShare, requested: Resources, requested_non_preemptible: Resources) -> QueueDetails:
    """The queue's figures a verdict carries (details.queueDetails of the condition reason)."""
    return QueueDetails(
        name=share.name, requested=vector(share.request), deserved=vector(share.quota),
        allocated=vector(share.allocated), allocated_non_preemptible=vector(share.allocated_non_preemptible),
        limit=vector(share.limit), pod_group_requested=vector(requested),
        pod_group_requested_non_preemptible=vector(requested_non_preemptible))


def check_over_limit(
    shares: Mapping[str, QueueShare], queue: str, requested: Resources, non_preemptible: bool
) -> CapacityVerdict | None:
    """The OverLimit check over the queue and its ancestors; None when within every limit."""
    for share in queue_path(shares, queue):
        for resource in RESOURCE_ORDER:
            limit = share.limit.get(resource)
            amount = requested.get(resource)
            if limit < 0 or amount == 0:
                continue
            allocated = share.allocated.get(resource)
            if limit < allocated + amount:
                message = over_limit_message(share.message_name, resource, limit, allocated, amount)
                np_requested = requested if non_preemptible else ZERO
                return CapacityVerdict(OVER_LIMIT, message, queue_details(share, requested, np_requested))
    return None


def check_non_preemptible_quota(
    shares: Mapping[str, QueueShare], queue: str, requested: Resources
) -> CapacityVerdict | None:
    """The NonPreemptibleOverQuota check (call it for non-preemptible jobs only)."""
    for share in queue_path(shares, queue):
        for resource in RESOURCE_ORDER:
            quota = share.quota.get(resource)
            amount = requested.get(resource)
            if quota < 0 or amount == 0:
                continue
            used = share.allocated_non_preemptible.get(resource)
            if quota < used + amount:
                message = non_preemptible_over_quota_message(
                    share.message_name, resource, quota, used, amount
                )
                details = queue_details(share, requested, requested)
                return CapacityVerdict(NON_PREEMPTIBLE_OVER_QUOTA, message, details)
    return None


def check_capacity(
    shares: Mapping[str, QueueShare], queue: str, requested: Resources, non_preemptible: bool
) -> CapacityVerdict | None:
    """OverLimit, then (non-preemptible jobs) NonPreemptibleOverQuota; None when the job fits."""
    if queue not in shares:
        return queue_does_not_exist(queue)
    verdict = check_over_limit(shares, queue, requested, non_preemptible)
    if verdict is None and non_preemptible:
        verdict = check_non_preemptible_quota(shares, queue, requested)
    return verdict

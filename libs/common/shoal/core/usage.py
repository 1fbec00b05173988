"""Time-based fair share without Prometheus: the maths of Shoal's own allocation history (pure, no I/O).

The fairshare service samples, for each shard and each snapshot, what every queue has allocated and what the
shard could give (capacity), per resource. Each sample adds `amount × seconds since the previous sample` to the
time bucket it falls in (`bucket_s` wide), so a bucket holds the integral of allocation and of capacity over the
time it covers: "queue q used X GPU-seconds out of a possible Y" (reference §3.5, KAI's
`sum_over_time(allocation) / sum_over_time(capacity)`). Buckets older than the window are trimmed.

Normalised usage of a queue and resource, in 0..1::

    usage(q, r) = Σ_b allocated(b, q, r) · w(b) / Σ_b capacity(b, r) · w(b)
    w(b)        = 0.5 ** (age(b) / half_life)     (1 without a half-life; age measured to the bucket's middle)

over the buckets inside the window: `sliding` (the last `window_s` seconds) or `tumbling` (buckets since the
current window started, windows beginning at `tumbling_start_s + n · window_s`). The planner and the
fairshare service hand the result to the core as `queue_usage(...)` (`ingest.config.Given.usage`; a queue the
SchedulerConfig's `spec.usage` lists wins), where it changes only the over-quota water-fill weights:
`s = max(0, nw + k·(nw − usage))`.

    history = [Bucket(start_s=0, seconds=60, capacity=Amounts(gpu=16_000 * 60), queues={"a": Amounts(gpu=8_000 * 60)})]
    normalised_usage(history, UsageParams(bucket_s=60, window_s=3600), now_s=60)   # {'a': {'gpu': 0.5, ...}}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import msgspec

from shoal.core.model import QueueUsage

RESOURCES = ("gpu", "cpu", "memory")
WINDOW_TYPES = ("sliding", "tumbling")


class UsageParams(msgspec.Struct, frozen=True, kw_only=True):
    """How history is kept and weighed; recorded next to the history so every reader uses the writer's."""

    bucket_s: int = 300
    window_s: int = 7 * 24 * 3600  # KAI's default windowSize 1w
    half_life_s: int = 0  # 0: no decay
    window_type: str = "sliding"  # sliding | tumbling
    tumbling_start_s: int = 0  # epoch seconds where tumbling windows are anchored
    max_gap_s: int = 0  # longest interval one sample may cover (0: one bucket); longer gaps count as unknown

    def problems(self) -> list[str]:
        found = []
        if self.bucket_s <= 0:
            found.append("bucket_s: must be > 0")
        if self.window_s < self.bucket_s:
            found.append("window_s: must be at least one bucket")
        if self.half_life_s < 0:
            found.append("half_life_s: must be >= 0")
        if self.window_type not in WINDOW_TYPES:
            found.append(f"window_type: must be one of {', '.join(WINDOW_TYPES)}")
        return found

    @property
    def gap_s(self) -> int:
        return self.max_gap_s or self.bucket_s


class Amounts(msgspec.Struct, frozen=True, kw_only=True):
    """One figure per resource in the core's units (milli-GPU, millicores, bytes), or their time integrals."""

    gpu: float = 0.0
    cpu: float = 0.0
    memory: float = 0.0

    def get(self, resource: str) -> float:
        return float(getattr(self, resource))

    def scaled(self, factor: float) -> Amounts:
        return Amounts(gpu=self.gpu * factor, cpu=self.cpu * factor, memory=self.memory * factor)


class Sample(msgspec.Struct, frozen=True, kw_only=True):
    """What one snapshot showed: the shard's capacity and each queue's allocation, at `at_s` (epoch seconds)."""

    at_s: float
    capacity: Amounts
    allocated: dict[str, Amounts]


class Bucket(msgspec.Struct, frozen=True, kw_only=True):
    """Integrals (amount · seconds) of capacity and per-queue allocation over `seconds` covered in the bucket."""

    start_s: int
    seconds: float = 0.0
    capacity: Amounts = Amounts()
    queues: dict[str, Amounts] = {}


def bucket_start(at_s: float, params: UsageParams) -> int:
    return int(math.floor(at_s / params.bucket_s)) * params.bucket_s


def covered_seconds(previous_s: float | None, at_s: float, params: UsageParams) -> float:
    """Seconds a sample at `at_s` accounts for: since the previous sample, at most one gap; 0 for the first
    sample, a repeated one, or one older than the previous (reordering)."""
    if previous_s is None or at_s <= previous_s:
        return 0.0
    return min(at_s - previous_s, float(params.gap_s))


def rates(sample: Sample) -> dict[str, float]:
    """The sample as per-second field increments of its bucket (the Redis adapter's storage layout):
    `cap:<resource>` for capacity, `q:<queue>:<resource>` for each non-zero allocation."""
    out = {f"cap:{r}": sample.capacity.get(r) for r in RESOURCES}
    for queue, amounts in sorted(sample.allocated.items()):
        for r in RESOURCES:
            if amounts.get(r):
                out[f"q:{queue}:{r}"] = amounts.get(r)
    return out


def record(history: dict[int, dict[str, float]], last_s: float | None, sample: Sample,
           params: UsageParams) -> float | None:
    """Add `sample` to an in-memory history (bucket start → fields) and trim it; returns the new last sample
    time. The reference for the Redis adapter, which does the same atomically in one script."""
    seconds = covered_seconds(last_s, sample.at_s, params)
    if last_s is not None and sample.at_s <= last_s:
        return last_s
    if seconds > 0:
        fields = history.setdefault(bucket_start(sample.at_s, params), {})
        fields["seconds"] = fields.get("seconds", 0.0) + seconds
        for name, rate in rates(sample).items():
            fields[name] = fields.get(name, 0.0) + rate * seconds
    cutoff = trim_before(params, sample.at_s)
    for start in [s for s in history if s < cutoff]:
        del history[start]
    return sample.at_s


def bucket_from_fields(start_s: int, fields: Mapping[str, float]) -> Bucket:
    """A bucket from its stored fields (sums of `rates` × seconds, plus `seconds`); unknown fields ignored."""
    capacity = {r: float(fields.get(f"cap:{r}", 0.0)) for r in RESOURCES}
    queues: dict[str, dict[str, float]] = {}
    for name, value in fields.items():
        if name.startswith("q:"):
            queue, _, resource = name[2:].rpartition(":")
            if queue and resource in RESOURCES:
                queues.setdefault(queue, {})[resource] = float(value)
    return Bucket(start_s=start_s, seconds=float(fields.get("seconds", 0.0)), capacity=Amounts(**capacity),
                  queues={q: Amounts(**v) for q, v in queues.items()})


def window_start(params: UsageParams, now_s: float) -> float:
    """The earliest time that still counts at `now_s`."""
    if params.window_type == "tumbling":
        elapsed = max(0.0, now_s - params.tumbling_start_s)
        return params.tumbling_start_s + math.floor(elapsed / params.window_s) * params.window_s
    return now_s - params.window_s


def in_window(bucket: Bucket, params: UsageParams, now_s: float) -> bool:
    start = window_start(params, now_s)
    if params.window_type == "tumbling":
        return start <= bucket.start_s <= now_s
    return bucket.start_s + params.bucket_s > start and bucket.start_s <= now_s


def weight(bucket: Bucket, params: UsageParams, now_s: float) -> float:
    if params.half_life_s <= 0:
        return 1.0
    age = max(0.0, now_s - (bucket.start_s + params.bucket_s / 2))
    return 0.5 ** (age / params.half_life_s)


def trim_before(params: UsageParams, now_s: float) -> int:
    """Bucket starts below this can be dropped: they will never be inside a window again."""
    return int(math.floor(window_start(params, now_s) / params.bucket_s) * params.bucket_s) - params.bucket_s


def normalised_usage(buckets: Iterable[Bucket], params: UsageParams, now_s: float) -> dict[str, dict[str, float]]:
    """Per queue and resource, weighted allocation over weighted capacity in the window, clamped to 0..1
    (0 where the shard had no capacity of that resource)."""
    capacity = dict.fromkeys(RESOURCES, 0.0)
    allocated: dict[str, dict[str, float]] = {}
    for bucket in buckets:
        if not in_window(bucket, params, now_s):
            continue
        w = weight(bucket, params, now_s)
        for r in RESOURCES:
            capacity[r] += bucket.capacity.get(r) * w
        for queue, amounts in bucket.queues.items():
            row = allocated.setdefault(queue, dict.fromkeys(RESOURCES, 0.0))
            for r in RESOURCES:
                row[r] += amounts.get(r) * w
    out = {}
    for queue in sorted(allocated):
        out[queue] = {r: (min(1.0, max(0.0, allocated[queue][r] / capacity[r])) if capacity[r] > 0 else 0.0)
                      for r in RESOURCES}
    return out


def queue_usage(usage: Mapping[str, Mapping[str, float]]) -> tuple[QueueUsage, ...]:
    """The core's per-queue usage (`ShardConfig.usage`) from the history's figures, by queue name; queues with no
    usage at all are left out, figures are clamped to 0..1 and rounded to 6 places (as they are published)."""
    def figure(row: Mapping[str, float], resource: str) -> float:
        return round(min(1.0, max(0.0, float(row.get(resource, 0.0)))), 6)

    return tuple(QueueUsage(queue=q, **{r: figure(row, r) for r in RESOURCES})
                 for q, row in sorted(usage.items()) if any(figure(row, r) > 0 for r in RESOURCES))


def epoch_seconds(rfc3339: str | int | float) -> float:
    """A snapshot's `taken_at` (RFC3339, or epoch seconds already) as epoch seconds."""
    if isinstance(rfc3339, int | float):
        return float(rfc3339)
    from datetime import UTC, datetime

    parsed = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def sample_of(at_s: float, capacity: Mapping[str, float], figures: Iterable) -> Sample:
    """A sample from the shard's capacity {gpu, cpu, memory} and the core's QueueFigures (allocated per
    resource). Every queue is recorded, parents included (their allocation is rolled up, as KAI's metric)."""
    allocated = {q.name: Amounts(gpu=q.gpu.allocated, cpu=q.cpu.allocated, memory=q.memory.allocated)
                 for q in figures}
    return Sample(at_s=at_s, capacity=Amounts(**{r: float(capacity.get(r, 0.0)) for r in RESOURCES}),
                  allocated=allocated)

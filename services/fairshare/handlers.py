"""Snapshot announcement → per-queue deserved / fair share / allocated per resource, on Kafka and in Redis.

The published view does not need every revision: a shard's figures are computed at most once per
`min_interval_s` (SHOAL_MIN_INTERVAL_S, default 1 s), from the newest revision then. Each computation is also
one sample of the shard's allocation history (time-based fair share, SPEC §2.7): the figures are computed with
the usage recorded so far (as the planner does), then what every queue holds now is added to the history
(`shoal.adapters.usage_history`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from shoal.adapters.kafka import Delivery, Publisher
from shoal.adapters.latest_value import LatestValue
from shoal.adapters.planning import ShardInputs
from shoal.adapters.shard_snapshots import Progress, SnapshotReader
from shoal.adapters.usage_history import UsageHistory
from shoal.core.cycle import fair_share_figures
from shoal.core.ingest.shard_model import assemble
from shoal.core.kept_pass import KeptPass
from shoal.core.usage import UsageParams, epoch_seconds, sample_of
from shoal.logging import get_logger
from shoal.messages import topics
from shoal.messages.base import new_meta
from shoal.messages.plan import FairShareComputed
from shoal.messages.snapshot import SnapshotPublished
from shoal.metrics import Metrics

log = get_logger("services.fairshare")

_RESOURCES = (("gpu", 1000.0), ("cpu", 1000.0), ("memory", 1.0))


@dataclass
class FairShare:
    snapshots: SnapshotReader
    results: LatestValue[FairShareComputed]
    bus: Publisher
    metrics: Metrics
    topic_prefix: str = ""
    history: UsageHistory | None = None  # where samples are recorded; None: no time-based fair share
    usage_params: UsageParams = UsageParams()
    inputs: ShardInputs = ShardInputs()  # the planner's: SchedulerConfig, sharing modes, namespace, usage source
    min_interval_s: float = 1.0  # at most one computation per shard this often (cycles come every few ms)
    progress: Progress = field(default_factory=Progress)  # the revision computed last, per shard
    last_at: dict[str, float] = field(default_factory=dict)
    kept: dict[str, KeptPass] = field(default_factory=dict)  # each shard's pod pass, kept between revisions

    def __post_init__(self) -> None:
        self._share = self.metrics.gauge("queue_fair_share", "Fair share per queue and resource "
                                         "(GPUs, CPU cores, memory bytes).", ["shard", "queue", "resource"])
        self._deserved = self.metrics.gauge("queue_deserved", "Deserved quota per queue and resource.",
                                            ["shard", "queue", "resource"])
        self._allocated = self.metrics.gauge("queue_allocated", "Allocated per queue and resource.",
                                             ["shard", "queue", "resource"])
        self._capacity = self.metrics.gauge("shard_capacity", "Capacity of the shard per resource (GPUs, CPU "
                                            "cores, memory bytes).", ["shard", "resource"])
        self._usage = self.metrics.gauge("queue_usage", "Normalised historical usage (0..1) per queue and "
                                         "resource, from the allocation history.", ["shard", "queue", "resource"])

    async def on_snapshot(self, message: SnapshotPublished, delivery: Delivery) -> None:
        shard = message.shard
        if self.progress.handled(shard, message.revision, message.chain):
            return
        wait = self.last_at.get(shard, float("-inf")) + self.min_interval_s - time.monotonic()
        if wait > 0:  # the announcements that arrive meanwhile are planned already: compute the newest once
            # but first: an announcement of an older chain (one before the latest base) is not skipped by its
            # revision above; when the newest revision is computed already it must not wait the interval out
            # (one stale announcement a second is fewer than arrive under churn: the lag would grow for ever)
            latest = await self.snapshots.read(shard)
            if latest is None or self.progress.handled(shard, latest.revision, latest.chain):
                return
            await asyncio.sleep(wait)
        self.last_at[shard] = time.monotonic()
        latest = await self.snapshots.read(shard)
        if latest is None or self.progress.handled(shard, latest.revision, latest.chain):
            return
        at_s = epoch_seconds(latest.taken_at)
        usage = await self.inputs.usage_at(shard, latest.taken_at)
        result = assemble(latest.model, now=latest.taken_at, revision=latest.revision,
                          config_doc=self.inputs.config_doc, given=self.inputs.given(shard, usage),
                          require_podgroup=latest.require_podgroup)
        figures, total = fair_share_figures(result.snapshot, self.kept.setdefault(shard, KeptPass()))
        capacity = {"gpu": total.gpu_milli, "cpu": total.cpu_milli, "memory": total.memory_bytes}
        if self.history is not None:
            await self.history.record(shard, sample_of(at_s, capacity, figures), self.usage_params)
        computed = FairShareComputed(meta=new_meta("fairshare", revision=latest.revision), shard=shard,
                                     revision=latest.revision, queues=figures)
        await self.results.put(shard, latest.revision, computed)
        await self.bus.publish(topics.FAIRSHARE.full(self.topic_prefix), computed, key=shard)
        self.progress.mark(shard, latest.revision, latest.chain)
        for res, scale in _RESOURCES:
            self._capacity.labels(shard, res).set(capacity[res] / scale)
        for q in figures:
            for res, scale in _RESOURCES:
                f = getattr(q, res)
                self._share.labels(shard, q.name, res).set(f.fair_share / scale)
                self._deserved.labels(shard, q.name, res).set(f.deserved / scale)
                self._allocated.labels(shard, q.name, res).set(f.allocated / scale)
                self._usage.labels(shard, q.name, res).set(usage.get(q.name, {}).get(res, 0.0))
        log.info("fairshare_published", shard=shard, revision=latest.revision, queues=len(figures))

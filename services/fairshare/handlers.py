"""Snapshot announcement → per-queue deserved / fair share / allocated per resource, on Kafka and in Redis."""

from __future__ import annotations

from dataclasses import dataclass, field

from shoal.adapters.kafka import Delivery, Publisher
from shoal.adapters.snapshot_store import LatestValue, SnapshotStore
from shoal.core.context import Context
from shoal.core.cycle import queue_figures
from shoal.core.ingest import snapshot_from_objects
from shoal.core.session import Session
from shoal.logging import get_logger
from shoal.messages import topics
from shoal.messages.base import new_meta
from shoal.messages.plan import FairShareComputed
from shoal.messages.snapshot import ClusterSnapshot, SnapshotPublished
from shoal.metrics import Metrics

log = get_logger("services.fairshare")

_RESOURCES = (("gpu", 1000.0), ("cpu", 1000.0), ("memory", 1.0))


@dataclass
class FairShare:
    store: SnapshotStore[ClusterSnapshot]
    results: LatestValue[FairShareComputed]
    bus: Publisher
    metrics: Metrics
    topic_prefix: str = ""
    last: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._share = self.metrics.gauge("queue_fair_share", "Fair share per queue and resource "
                                         "(GPUs, CPU cores, memory bytes).", ["shard", "queue", "resource"])
        self._deserved = self.metrics.gauge("queue_deserved", "Deserved quota per queue and resource.",
                                            ["shard", "queue", "resource"])
        self._allocated = self.metrics.gauge("queue_allocated", "Allocated per queue and resource.",
                                             ["shard", "queue", "resource"])

    async def on_snapshot(self, message: SnapshotPublished, delivery: Delivery) -> None:
        shard = message.shard
        if message.revision <= self.last.get(shard, -1):
            return
        latest = await self.store.latest(shard)
        if latest is None or latest.revision <= self.last.get(shard, -1):
            return
        result = snapshot_from_objects(latest.value.objects, now=latest.value.taken_at, revision=latest.revision)
        figures = tuple(queue_figures(Context(Session(result.snapshot))))
        computed = FairShareComputed(meta=new_meta("fairshare", revision=latest.revision), shard=shard,
                                     revision=latest.revision, queues=figures)
        await self.results.put(shard, latest.revision, computed)
        await self.bus.publish(topics.FAIRSHARE.full(self.topic_prefix), computed, key=shard)
        self.last[shard] = latest.revision
        for q in figures:
            for res, scale in _RESOURCES:
                f = getattr(q, res)
                self._share.labels(shard, q.name, res).set(f.fair_share / scale)
                self._deserved.labels(shard, q.name, res).set(f.deserved / scale)
                self._allocated.labels(shard, q.name, res).set(f.allocated / scale)
        log.info("fairshare_published", shard=shard, revision=latest.revision, queues=len(figures))

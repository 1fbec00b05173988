"""Mirror → one snapshot per shard per period (debounced), stored in Redis, announced on Kafka.

Decisions in flight are read from Redis and carried in the snapshot; entries the cluster now shows
done (pod bound or gone) or that expired are removed here, right after the snapshot that shows them
done is stored, so a planner that reads the in-flight hash before the latest snapshot never sees a pod as
both unbound and not in flight.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from services.snapshotter.mirror import Mirror
from services.snapshotter.translate import shard_objects, shards_of
from shoal.adapters.inflight import InFlight
from shoal.adapters.kafka import Publisher
from shoal.adapters.snapshot_store import SnapshotStore
from shoal.errors import TransientError
from shoal.logging import get_logger
from shoal.messages import topics
from shoal.messages.base import new_meta
from shoal.messages.snapshot import ClusterSnapshot, InFlightBind, SnapshotPublished
from shoal.metrics import Metrics

log = get_logger("services.snapshotter")


def settled(entry: InFlightBind, pods_by_uid: dict[str, dict], now_s: float) -> bool:
    """True when an in-flight bind no longer needs to count: the pod is bound, gone, or the entry expired."""
    if entry.expires_at <= now_s:
        return True
    pod = pods_by_uid.get(entry.pod_uid)
    return pod is None or bool((pod.get("spec") or {}).get("nodeName"))


@dataclass
class Snapshotter:
    mirror: Mirror
    store: SnapshotStore[ClusterSnapshot]
    inflight: InFlight
    bus: Publisher
    metrics: Metrics
    scheduler_name: str = "shoal-scheduler"
    shards: tuple[str, ...] = ()
    shard_prefix: str = ""
    period_s: float = 1.0
    heartbeat_s: float = 10.0
    topic_prefix: str = ""
    require_podgroup: bool = False
    dirty: asyncio.Event = field(default_factory=asyncio.Event)
    revisions: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._published = self.metrics.counter("snapshots_published_total", "Snapshots published.", ["shard"])
        self._build = self.metrics.histogram("snapshot_build_seconds", "Mirror to snapshot stored.", ["shard"])
        self._size = self.metrics.gauge("snapshot_objects", "Objects in the latest snapshot.", ["shard"])

    def mark_dirty(self) -> None:
        self.dirty.set()

    async def run(self) -> None:
        await self.mirror.wait_synced()
        log.info("mirror_synced", objects=sum(len(v) for v in self.mirror.objects.values()))
        last = 0.0
        while True:
            try:
                await asyncio.wait_for(self.dirty.wait(), timeout=self.heartbeat_s)
            except TimeoutError:
                pass  # publish anyway: time-based decisions (grace periods, min-runtime) need fresh cycles
            wait = self.period_s - (time.monotonic() - last)
            if wait > 0:
                await asyncio.sleep(wait)  # debounce: at most one snapshot per shard per period
            self.dirty.clear()
            last = time.monotonic()
            try:
                await self.publish_all()
            except TransientError as exc:  # Kafka (or Redis) unreachable: the next period publishes again
                log.warning("snapshot_publish_failed", error=str(exc))
                self.dirty.set()

    async def publish_all(self) -> None:
        objects = list(self.mirror.all())
        found = [s for s in shards_of(objects) if s.startswith(self.shard_prefix)]
        pods = {(o.get("metadata") or {}).get("uid", ""): o for o in objects if o.get("kind") == "Pod"}
        for shard in sorted(set(self.shards) | set(found)):
            await self.publish(shard, objects, pods)

    async def publish(self, shard: str, objects: list[dict], pods: dict[str, dict] | None = None) -> None:
        """Store and announce one shard's snapshot; `pods` (uid → pod of `objects`) is built once per round."""
        started = time.perf_counter()
        now_s = time.time()
        if pods is None:
            pods = {(o.get("metadata") or {}).get("uid", ""): o for o in objects if o.get("kind") == "Pod"}
        entries = await self.inflight.all(shard)
        done = {e.pod_uid for e in entries if settled(e, pods, now_s)}
        live = tuple(e for e in entries if e.pod_uid not in done)
        revision = await self._next_revision(shard)
        snap = ClusterSnapshot(shard=shard, revision=revision,
                               taken_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                               objects=tuple(shard_objects(objects, shard, self.scheduler_name,
                                                            require_podgroup=self.require_podgroup)),
                               inflight=live)
        if not await self.store.publish(shard, revision, snap):
            self.revisions.pop(shard, None)  # someone else is ahead (another replica): re-read next time
            return
        # only now that the snapshot showing them bound is the latest: a planner that no longer finds an
        # entry must read a snapshot with its bind (removed earlier, it could read the previous snapshot
        # and book the pod's resources a second time)
        await self.inflight.remove(shard, done)
        nodes = n_pods = pending = 0
        for o in snap.objects:
            if o["kind"] == "Node":
                nodes += 1
            elif o["kind"] == "Pod":
                n_pods += 1
                pending += not o.get("spec", {}).get("nodeName")
        announced = SnapshotPublished(meta=new_meta("snapshotter", revision=revision), shard=shard,
                                      revision=revision, nodes=nodes, pods=n_pods, pending_pods=pending)
        await self.bus.publish(topics.SNAPSHOTS.full(self.topic_prefix), announced, key=shard)
        self._published.labels(shard).inc()
        self._size.labels(shard).set(len(snap.objects))
        self._build.labels(shard).observe(time.perf_counter() - started)
        log.info("snapshot_published", shard=shard, revision=revision, objects=len(snap.objects),
                 pending=pending, inflight=len(live), settled=len(done))

    async def _next_revision(self, shard: str) -> int:
        if shard not in self.revisions:
            self.revisions[shard] = await self.store.latest_revision(shard) or 0
        self.revisions[shard] += 1
        return self.revisions[shard]

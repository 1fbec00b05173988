"""Watch events → typed shard models → one delta per shard per cycle in Redis, announced on Kafka.

Each watched object is translated when it changes (`services.snapshotter.shards`); a change that alters what
the core reads wakes the publisher, which waits until events pause for `debounce_s` (at most `max_delay_s`
after the first one) and then stores, for every shard that changed, a delta (`shoal.adapters.shard_snapshots`)
and announces it. A shard that has not changed is announced again after `heartbeat_s` (grace periods and
minimum runtimes need fresh cycles). The whole model is stored as a base that starts a new chain when this
process first publishes a shard, when another writer moved the shard on and after a failed write; and as a
checkpoint of its chain (with that revision's delta: planners that follow the chain read the delta, not the
base) when its deltas add up to more than `base_every` or to half the base's bytes.

Decisions in flight are read from Redis; entries the cluster now shows done (pod bound or gone) or that
expired are removed here, right after the revision that shows them done is stored, so a planner that reads
the in-flight hash before the latest snapshot never sees a pod as both unbound and not in flight. A revision
reads only the entries of the pods that were bound, started deleting or went since the shard's last check (a
lease is written before its plan is published, so before its pod can be bound); the whole hash is read at most
every `sweep_s`, for entries that expired or whose pod settled before the entry was seen.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from services.snapshotter.mirror import Mirror
from services.snapshotter.translate import Shards
from shoal.adapters.inflight import InFlight
from shoal.adapters.kafka import Publisher
from shoal.adapters.shard_snapshots import SnapshotWriter
from shoal.core.ingest.shard_model import Changes
from shoal.errors import TransientError
from shoal.logging import get_logger
from shoal.messages import topics
from shoal.messages.base import new_meta
from shoal.messages.snapshot import InFlightBind, SnapshotPublished
from shoal.metrics import Metrics

log = get_logger("services.snapshotter")


def settled(entry: InFlightBind, pods_by_uid, now_s: float) -> bool:
    """True when an in-flight decision no longer needs to count: the entry expired, the pod is gone, or it is
    bound (a bind) or deleting (an eviction)."""
    if entry.expires_at <= now_s:
        return True
    pod = pods_by_uid.get(entry.pod_uid)
    if pod is None:
        return True
    if entry.eviction:
        return bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return bool((pod.get("spec") or {}).get("nodeName"))


_now_text: list = [None, ""]  # the second last formatted, and its text


def now_text() -> str:
    """The time to the second, as RFC 3339 text (formatted once per second: every watch event asks for it)."""
    second = int(time.time())
    if second != _now_text[0]:
        _now_text[:] = [second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")]
    return _now_text[1]


@dataclass
class Chain:
    """What this process last stored for a shard."""

    revision: int
    chain: str
    base_bytes: int
    deltas: int = 0
    delta_bytes: int = 0
    broken: bool = False  # a delta's write failed: its changes are in no delta, only a new chain can go on


@dataclass
class Snapshotter:
    mirror: Mirror
    shards: Shards
    writer: SnapshotWriter
    inflight: InFlight
    bus: Publisher
    metrics: Metrics
    debounce_s: float = 0.02
    max_delay_s: float = 0.1
    heartbeat_s: float = 10.0
    base_every: int = 500
    topic_prefix: str = ""
    require_podgroup: bool = False
    sweep_s: float = 1.0
    dirty: asyncio.Event = field(default_factory=asyncio.Event)
    chains: dict[str, Chain] = field(default_factory=dict)
    announced: dict[str, float] = field(default_factory=dict)  # shard → monotonic time of its last revision
    swept: dict[str, float] = field(default_factory=dict)  # shard → monotonic time its whole in-flight hash was read
    touched: dict[str, set[str]] = field(default_factory=dict)  # swept shard → uids of pods settled since its check

    def __post_init__(self) -> None:
        m = self.metrics
        self._published = m.counter("snapshots_published_total", "Snapshot revisions published.", ["shard", "kind"])
        self._build = m.histogram("snapshot_build_seconds", "Changes taken to revision announced.", ["shard"])
        self._size = m.gauge("snapshot_objects", "Objects in the shard's model.", ["shard"])
        self._bytes = m.counter("snapshot_bytes_total", "Bytes stored in Redis for snapshots.", ["shard", "kind"])
        self._skipped = m.counter("snapshot_objects_skipped_total", "Watched objects left out as broken.", ["kind"])

    def on_change(self, obj: dict, deleted: bool) -> None:
        """One watch event (the mirror's callback): translate it; wake the publisher if a model changed."""
        if obj.get("kind") == "Pod" and (deleted or (obj.get("spec") or {}).get("nodeName")
                                         or (obj.get("metadata") or {}).get("deletionTimestamp")):
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            for uids in self.touched.values():
                uids.add(uid)
        if deleted:
            self.shards.remove(obj)
        else:
            problem = self.shards.update(obj)
            if problem is not None:
                meta = obj.get("metadata") or {}
                self._skipped.labels(str(obj.get("kind"))).inc()
                log.warning("snapshot_object_skipped", kind=obj.get("kind"), namespace=meta.get("namespace"),
                            name=meta.get("name"), problem=problem)
        if self.shards.changed():
            self.dirty.set()

    async def run(self) -> None:
        await self.mirror.wait_synced()
        log.info("mirror_synced", objects=sum(len(v) for v in self.mirror.objects.values()))
        self.dirty.set()  # the first round publishes every active shard
        while True:
            try:
                await asyncio.wait_for(self.dirty.wait(), timeout=self._until_heartbeat())
            except TimeoutError:
                pass
            await self._settle()
            try:
                await self.publish_all()
            except TransientError as exc:  # Kafka (or Redis) unreachable: the next round publishes again
                log.warning("snapshot_publish_failed", error=str(exc))
                await asyncio.sleep(min(1.0, self.heartbeat_s))
                self.dirty.set()

    def _until_heartbeat(self) -> float:
        """Seconds until the shard announced longest ago is due again (shards no longer active do not count)."""
        active = self.shards.active()
        for shard in set(self.announced) - set(active):
            del self.announced[shard]
        for shard in set(self.touched) - set(active):
            del self.touched[shard]
            self.swept.pop(shard, None)
        last = min((self.announced.get(shard, float("-inf")) for shard in active), default=None)
        if last is None:
            return self.heartbeat_s
        return max(0.0, last + self.heartbeat_s - time.monotonic())

    async def _settle(self) -> None:
        """Wait while events keep coming, `debounce_s` apart at most, but no longer than `max_delay_s`."""
        deadline = time.monotonic() + self.max_delay_s
        while self.dirty.is_set():
            self.dirty.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(self.dirty.wait(), timeout=min(self.debounce_s, left))
            except TimeoutError:
                return

    async def publish_all(self) -> None:
        changed = set(self.shards.changed())
        due = time.monotonic() - self.heartbeat_s
        for shard in self.shards.active():
            if shard in changed or self.announced.get(shard, float("-inf")) <= due:
                await self.publish(shard)

    async def publish(self, shard: str) -> None:
        started = time.perf_counter()
        entries, swept = await self._leases_to_check(shard)
        now_s = time.time()
        pods = self.mirror.objects.get("Pod", {})
        done = {e.pod_uid for e in entries if settled(e, pods, now_s)}
        changes = self.shards.take(shard)
        chain = self.chains.get(shard)
        taken_at = now_text()
        kind = "delta"
        written = None
        if chain is not None and not chain.broken and chain.deltas < self.base_every \
                and chain.delta_bytes * 2 < chain.base_bytes:
            try:
                written = await self.writer.publish_delta(shard, chain.revision + 1, changes, chain=chain.chain,
                                                          taken_at=taken_at, require_podgroup=self.require_podgroup)
            except TransientError:
                chain.broken = True  # the changes taken are only in the model now: a new chain's base carries them
                raise
        if written is not None and chain is not None:
            chain.revision += 1
            chain.deltas += 1
            chain.delta_bytes += written
        else:
            kind = "base"
            checkpoint = chain is not None and written is None and not chain.broken and \
                (chain.deltas >= self.base_every or chain.delta_bytes * 2 >= chain.base_bytes)
            chain = await self._base(shard, taken_at,
                                     (chain.chain, chain.revision, changes) if checkpoint and chain is not None else None)
            written = chain.base_bytes
        # only now that the revision showing them bound is the latest: a planner that no longer finds an
        # entry must read a snapshot with its bind (removed earlier, it could read the previous revision
        # and book the pod's resources a second time)
        await self.inflight.remove(shard, done)
        model = self.shards.model(shard)
        announced = SnapshotPublished(meta=new_meta("snapshotter", revision=chain.revision), shard=shard,
                                      revision=chain.revision, nodes=len(model.nodes), pods=len(model.pods),
                                      pending_pods=self.shards.pending_pods.get(shard, 0), chain=chain.chain)
        await self.bus.publish(topics.SNAPSHOTS.full(self.topic_prefix), announced, key=shard)
        self.announced[shard] = time.monotonic()
        self._published.labels(shard, kind).inc()
        self._bytes.labels(shard, kind).inc(written)
        self._size.labels(shard).set(model.size())
        self._build.labels(shard).observe(time.perf_counter() - started)
        log.info("snapshot_published", shard=shard, revision=chain.revision, kind=kind, bytes=written,
                 objects=model.size(), pending=announced.pending_pods, checked=len(entries), swept=swept,
                 settled=len(done))

    async def _leases_to_check(self, shard: str) -> tuple[list[InFlightBind], bool]:
        """The in-flight entries this revision checks, and whether they are the whole hash: the entries of the
        pods touched since the shard's last check, or every entry once `sweep_s` has passed."""
        now = time.monotonic()
        touched = self.touched.get(shard)
        if touched is None or now - self.swept.get(shard, float("-inf")) >= self.sweep_s:
            self.touched[shard] = set()  # from here on events are kept for the next check
            self.swept[shard] = now
            return await self.inflight.all(shard), True
        self.touched[shard] = set()
        found = await self.inflight.get_many(shard, sorted(u for u in touched if u))
        return list(found.values()), False

    async def _base(self, shard: str, taken_at: str, follows: tuple[str, int, Changes] | None = None) -> Chain:
        """Store the whole model: as a checkpoint of this process's chain (`follows`: chain, its revision,
        the changes of the next), which planners that follow the chain never read, or, when that is not
        possible (another writer moved on), as the start of a new chain."""
        old = self.chains.pop(shard, None)
        if follows is not None:
            name, revision = follows[0], follows[1] + 1
            stored = await self.writer.publish_base(shard, revision, self.shards.model(shard).entries(),
                                                    taken_at=taken_at, require_podgroup=self.require_podgroup,
                                                    follows=(name, follows[2]))
            if stored is not None:
                self.chains[shard] = chain = Chain(revision=revision, chain=name, base_bytes=stored[1])
                return chain
        mine = old.revision if old is not None else 0  # numbering goes on from here after a Redis flush
        for _ in range(50):
            revision = max(await self.writer.latest_revision(shard) or 0, mine) + 1
            stored = await self.writer.publish_base(shard, revision, self.shards.model(shard).entries(),
                                                    taken_at=taken_at, require_podgroup=self.require_podgroup)
            if stored is not None:
                self.chains[shard] = chain = Chain(revision=revision, chain=stored[0], base_bytes=stored[1])
                return chain
        raise TransientError(f"snapshot base for shard {shard!r}: other writers kept moving ahead")

"""Snapshot announcement → plan: read in-flight binds, then the latest snapshot, run the core, publish.

The planner keeps each shard's typed model and applies the deltas since the revision it planned last
(`shoal.adapters.shard_snapshots`); in-flight binds are applied on the typed model (`assemble`), nothing is
re-read from manifests. Ownership: snapshots are keyed by shard, so the consumer group gives each shard's
partition to one planner at a time. In-flight binds are read BEFORE the snapshot (see shoal.adapters.inflight).
Announcements that queued up while a cycle ran are one cycle: the next plans the newest revision.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from services.planner.translate import (
    cluster_ops,
    decisions,
    inflight_binds,
    inflight_entries,
    inflight_evictions,
)
from services.planner.verdicts import SnapshotGroups, verdict_changes
from shoal.adapters.inflight import InFlight
from shoal.adapters.kafka import Delivery, Publisher
from shoal.adapters.latest_value import LatestValue
from shoal.adapters.planning import ShardInputs
from shoal.adapters.shard_snapshots import Current, Progress, SnapshotReader
from shoal.adapters.verdicts import PublishedVerdicts
from shoal.core.cycle import run_cycle_timed
from shoal.core.ingest.common import IngestError, parse_time
from shoal.core.ingest.shard_model import assemble, unplaced_pods
from shoal.core.kept_pass import KeptPass
from shoal.core.plan import Bind, Evict, Pipeline, SetCondition
from shoal.logging import get_logger
from shoal.messages import topics
from shoal.messages.base import new_meta
from shoal.messages.plan import FairShareComputed, PlanIssued
from shoal.messages.snapshot import SnapshotPublished
from shoal.metrics import Metrics

log = get_logger("services.planner")
UNSCHEDULABLE = "io.shoal.decision.unschedulable"
MAX_CAPPED_REPEATS = 100  # capped cycles planned after one announcement's (2 million pods at the default cap)


@dataclass
class Planner:
    shard_filter: frozenset[str]
    snapshots: SnapshotReader
    fair_shares: LatestValue[FairShareComputed]
    inflight: InFlight
    bus: Publisher
    metrics: Metrics
    topic_prefix: str = ""
    inflight_ttl_s: float = 60.0
    fairshare_stale_revisions: int = 5
    fairshare_stale_s: float = 10.0
    inputs: ShardInputs = ShardInputs()  # SchedulerConfig, sharing modes, reservation namespace, usage history
    verdicts: PublishedVerdicts | None = None  # pending verdicts published last (None: every cycle's, as before)
    verdict_reassert_s: float = 600.0  # an unchanged verdict is published again after this long (0: never)
    progress: Progress = field(default_factory=Progress)  # the revision planned last, per shard
    kept: dict[str, KeptPass] = field(default_factory=dict)  # each shard's pod pass, kept between cycles
    _stale_warned: dict[str, float] = field(default_factory=dict)  # shard → when fairshare_stale was logged
    idle_cycle_s: float = 1.0  # with nothing left to place after an empty plan, a cycle at most this often
    bind_cap: int = 20_000  # a cycle places no further job past this many pods (0: no cap; `run_cycle_timed`)
    _idle: dict[str, float] = field(default_factory=dict)  # shard → when its last plan, an empty one, was made
    # shard → the binds in flight last read, and until when all of them hold (`_idle_by_leases_read`)
    _binds_read: dict[str, tuple[dict, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        m = self.metrics
        self._plans = m.counter("planner_plans_total", "Plans published.", ["shard"])
        self._ops = m.counter("planner_ops_total", "Plan operations published.", ["shard", "op"])
        self._capped = m.counter("planner_cycles_capped_total",
                                 "Cycles that stopped at the bind cap (the next is planned at once).", ["shard"])
        self._skipped = m.counter("planner_cycles_skipped_total",
                                  "Revisions left unplanned: nothing to place after an empty plan.", ["shard"])
        self._cycle = m.histogram("planner_cycle_seconds", "Snapshot read to plan published.", ["shard"])
        self._stale = m.gauge("planner_fairshare_lag_revisions",
                              "Snapshot revisions the fairshare service is behind the planner.", ["shard"])
        self._problems = m.counter("planner_config_problems_total", "Problems in the SchedulerConfig.", ["shard"])

    async def on_snapshot(self, message: SnapshotPublished, delivery: Delivery) -> None:
        shard = message.shard
        if self.shard_filter and shard not in self.shard_filter:
            return
        if self.progress.handled(shard, message.revision, message.chain):
            return  # a duplicate or an old announcement: a newer revision was planned already
        again, repeats = await self._plan(shard), 0
        while again:  # the cycle stopped at the bind cap: plan on at once, its binds now in flight
            if repeats == MAX_CAPPED_REPEATS:  # leases that do not hold (a TTL of 0) would plan the same pods
                log.warning("planner_capped_cycles_stopped", shard=shard, cycles=repeats + 1)
                return  # the next revision goes on
            repeats += 1
            again = await self._plan(shard, capped_before=True)

    async def _plan(self, shard: str, *, capped_before: bool = False) -> bool:
        """One cycle on the shard's newest snapshot; True when it stopped at `bind_cap` with jobs left."""
        started = time.perf_counter()
        if not capped_before and await self._idle_by_leases_read(shard):
            return False
        # read again when that was not enough: a cycle plans on the snapshot read after the leases, never before
        inflight = await self.inflight.all(shard)  # before the snapshot, never after
        latest = await self.snapshots.read(shard)
        if latest is None or (not capped_before and self.progress.handled(shard, latest.revision, latest.chain)):
            return False
        now_s = time.time()
        binds = inflight_binds(inflight, now_s)
        self._binds_read[shard] = (binds, min((e.expires_at for e in inflight if e.expires_at > now_s
                                               and not e.eviction), default=float("inf")))
        if not capped_before and self._idle_now(shard, latest, binds):
            self._skip(shard, latest)
            return False
        usage = await self.inputs.usage_at(shard, latest.taken_at)
        result = assemble(latest.model, now=latest.taken_at, revision=latest.revision,
                          config_doc=self.inputs.config_doc, given=self.inputs.given(shard, usage),
                          inflight=binds, evicting=inflight_evictions(inflight, now_s),
                          require_podgroup=latest.require_podgroup)
        for problem in result.problems:
            self._problems.labels(shard).inc()
            log.warning("scheduler_config_problem", shard=shard, field=problem.field, problem=problem.message)
        await self._check_fairshare(shard, latest.revision)
        plan, timings = run_cycle_timed(result.snapshot, kept=self.kept.setdefault(shard, KeptPass()),
                                        bind_cap=self.bind_cap)
        capped = bool(timings.counters.get("allocate.capped"))
        await self.inflight.add(shard, inflight_entries(plan, now_s=time.time(), ttl_s=self.inflight_ttl_s))
        groups = SnapshotGroups(result.snapshot.pod_groups)
        issued = PlanIssued(meta=new_meta("planner", revision=latest.revision, id=plan.plan_id), shard=shard,
                            plan_id=plan.plan_id, revision=latest.revision, ops=cluster_ops(plan.ops, groups),
                            queues=plan.queues)
        # the plan and its decisions go out together (the producer batches them); all are awaited before the
        # revision counts as planned and the announcement's offset is committed
        decision_topic = topics.DECISIONS.full(self.topic_prefix)
        events, changes = decisions(plan, shard), None
        if self.verdicts is not None:  # a pending verdict goes out when it changes, not every cycle
            changes = verdict_changes(plan, await self.verdicts.all(shard), now_s=time.time(),
                                      pod_groups=groups,
                                      reassert_s=self.verdict_reassert_s)
            events = [e for e in events if e.type != UNSCHEDULABLE or e.subject in changes.publish]
        await asyncio.gather(self.bus.publish(topics.PLANS.full(self.topic_prefix), issued, key=shard),
                             *(self.bus.publish(decision_topic, event, key=shard) for event in events))
        if changes is not None and self.verdicts is not None:  # after the publish: a crash in between repeats
            await self.verdicts.update(shard, changes.store, changes.drop)  # a verdict, never loses one
        self.progress.mark(shard, latest.revision, latest.chain)
        if plan.ops:
            self._idle.pop(shard, None)
        else:
            self._idle[shard] = time.monotonic()
        self._plans.labels(shard).inc()
        for kind in (Bind, Pipeline, Evict, SetCondition):
            count = len(plan.of(kind))
            if count:
                self._ops.labels(shard, kind.__name__).inc(count)
        self._cycle.labels(shard).observe(time.perf_counter() - started)
        log.info("plan_published", shard=shard, revision=latest.revision, plan_id=plan.plan_id,
                 binds=len(plan.of(Bind)), pipelined=len(plan.of(Pipeline)), evictions=len(plan.of(Evict)),
                 unschedulable=len(plan.of(SetCondition)), inflight=len(inflight), capped=capped)
        if capped:
            self._capped.labels(shard).inc()
        return capped

    async def _idle_by_leases_read(self, shard: str) -> bool:
        """True when the newest revision was left unplanned (or planned already) with no read of the leases: the
        shard is idle (`_idle_now`) by the binds in flight read last. They are read again for the cycle due every
        `idle_cycle_s` and whenever a pending pod has none of them; a lease the binder dropped since (its bind
        failed) is seen by that cycle at the latest. In a backlog's drain, after its binds went out, each
        revision read thousands of leases only to find nothing to do. Nothing is planned on these binds."""
        seen = self._binds_read.get(shard)
        if seen is None or time.time() >= seen[1] or shard not in self._idle:
            return False
        latest = await self.snapshots.read(shard)
        if latest is None or self.progress.handled(shard, latest.revision, latest.chain):
            return True
        if not self._idle_now(shard, latest, seen[0]):
            return False
        self._skip(shard, latest)
        return True

    def _skip(self, shard: str, latest: Current) -> None:
        self.progress.mark(shard, latest.revision, latest.chain)
        self._skipped.labels(shard).inc()

    def _idle_now(self, shard: str, latest: Current, binds: dict) -> bool:
        """True when this revision's cycle may be left out: the shard's last plan was empty, no more than
        `idle_cycle_s` ago, and no pending pod is left to place (each has its bind in flight, or none is
        pending), so a cycle would find nothing to do. While a backlog's binds land (a revision every snapshot
        delay, thousands of leases to lay over the model), at most one cycle per `idle_cycle_s` then keeps the
        queues' figures and the time-based actions going; a pod that arrives is planned at once."""
        idle_since = self._idle.get(shard)
        if idle_since is None or time.monotonic() - idle_since >= self.idle_cycle_s:
            return False
        return unplaced_pods(latest.model, config_doc=self.inputs.config_doc, inflight=binds,
                             require_podgroup=latest.require_podgroup) == 0

    async def _check_fairshare(self, shard: str, revision: int) -> None:
        """The core divides fair share itself each cycle; the fairshare service's figures are the published
        view (metrics, status, explain). Report when that view falls behind, so operators see it: more than
        `fairshare_stale_revisions` behind and older than `fairshare_stale_s` (the service publishes a shard at most
        once per its interval: a busy shard is always a few revisions ahead), logged once per that time."""
        current = await self.fair_shares.get(shard)
        lag = revision - current.revision if current is not None else revision
        self._stale.labels(shard).set(lag)
        age = _age_s(current.value.meta.produced_at) if current is not None else None
        now = time.monotonic()
        if lag > self.fairshare_stale_revisions and (age is None or age > self.fairshare_stale_s) and \
                now - self._stale_warned.get(shard, float("-inf")) >= self.fairshare_stale_s:
            self._stale_warned[shard] = now
            log.warning("fairshare_stale", shard=shard, revision=revision,
                        fairshare_revision=current.revision if current else None, lag=lag,
                        age_s=round(age, 1) if age is not None else None)


def _age_s(produced_at: str) -> float | None:
    """Seconds since a message's `meta.produced_at` (None when it cannot be read)."""
    try:
        return (datetime.now(UTC) - parse_time(produced_at, "meta.produced_at")).total_seconds()
    except IngestError:
        return None

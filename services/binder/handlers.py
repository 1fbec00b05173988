"""Plan → Kubernetes API calls, idempotently: a replayed plan never binds twice and never creates a
second reservation pod for one shared GPU.

Binds are guarded by their in-flight entry (the planner's lease for that pod): a bind whose entry is
gone or names another plan is stale and skipped. A bind that fails removes its entry, so the pod is
planned again. Evictions go through the Eviction API (PDBs respected) unless eviction_mode=delete.

This module holds the plan's phases and the binds with their leases; `Binder` takes the rest from one module
per job: `shared_gpus` (reservation pods, what a fraction is given), `evictions`, `writes` (conditions, status,
events) and `publishing` (BindResults and decisions).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from services.binder import kubeobjects as ko
from services.binder.bind_failures import BindFailures
from services.binder.evictions import Evictions
from services.binder.fractions import FractionRefused
from services.binder.publishing import Publishing
from services.binder.reservation_watch import ReservationWatch
from services.binder.shared_gpus import SharedGpus
from services.binder.write_order import Turn, WriteOrder
from shoal.adapters import kube as k
from shoal.adapters.dedup import SeenIds
from shoal.adapters.inflight import InFlight, live
from shoal.adapters.kafka import Delivery, Publisher
from shoal.core import reasons
from shoal.core.fields import text, value_at
from shoal.core.ingest.common import IngestError, parse_time
from shoal.core.model import DEFAULT_RESERVATION_NAMESPACE
from shoal.core.plan import (
    Annotate,
    Bind,
    ClearCondition,
    Evict,
    Pipeline,
    PodEvent,
    PodGroupEvent,
    Reserve,
    SetCondition,
    SetCorePods,
)
from shoal.core.plan_effects import annotation_patch, cleared_condition_patch, core_pods_patch
from shoal.core.sharing_mode import DEFAULT_MODE
from shoal.errors import ConflictError, PermanentError, TransientError
from shoal.logging import get_logger
from shoal.messages.plan import PlanIssued
from shoal.messages.snapshot import InFlightBind
from shoal.metrics import Metrics

log = get_logger("services.binder")

LEASE_RENEW_MIN_WAIT_S = 1.0  # the least time between two renewals of one plan's leases


@dataclass(frozen=True)
class BindNotice:
    """The event about a bind (Scheduled, BindingError), posted after the plan's binds: the op named the uid."""

    pod: str
    pod_uid: str
    reason: str
    message: str
    type: str


# a plan's ops that no later plan's can contradict (events about what happened): they go out right after the
# plan's binds, not in plan order
UNORDERED = (BindNotice, PodGroupEvent, Pipeline)


@dataclass
class Binder(Publishing, SharedGpus, Evictions):
    kube: k.Kube
    inflight: InFlight
    seen: SeenIds
    bus: Publisher
    metrics: Metrics
    topic_prefix: str = ""
    reservation_namespace: str = DEFAULT_RESERVATION_NAMESPACE
    reservation_timeout_s: float = 40.0
    reservation_image: str = ko.RESERVATION_IMAGE
    eviction_mode: str = "evict"  # evict (Eviction API, PDBs respected) | delete (KAI's behaviour)
    event_dedupe_s: float = 60.0
    reservation_grace_s: float = 30.0
    parallel: int = 64  # API calls in flight per plan phase
    queue_status_interval_s: float = 1.0  # a queue's status written at most this often (`Writes.queue_statuses`)
    reservations: ReservationWatch | None = None  # GPU ids of reservation pods from a watch (None: read the pod)
    sharing_mode_of: Callable[[str], str] = lambda shard: DEFAULT_MODE  # SHOAL_[POOL_]GPU_SHARING_MODE(S)
    fraction_metadata: str = "binding"  # binding | patch: how a fraction's labels reach it (`binding_metadata`)
    _events: dict[tuple, float] = field(default_factory=dict)
    _queue_status: dict[str, dict] = field(default_factory=dict)
    _queue_due: dict[str, dict] = field(default_factory=dict)
    _queue_written_at: dict[str, float] = field(default_factory=dict)
    _queue_timer: asyncio.Future | None = None
    _queue_shard: dict[str, str] = field(default_factory=dict)
    _publishing: dict[str, list[asyncio.Task]] = field(default_factory=dict)  # plan id → sends not awaited yet
    _notices: dict[str, list[BindNotice]] = field(default_factory=dict)  # plan id → events of its binds
    _order: WriteOrder = field(default_factory=WriteOrder)  # plan order per object written (`write_order`)
    _started: dict[str, int] = field(default_factory=dict)  # shard → plans started here (the latest one's number)
    _queue_locks: dict[str, asyncio.Lock] = field(default_factory=dict)  # one Queue status write at a time
    _leases: dict[str, dict] = field(default_factory=dict)  # plan id → its binds' leases, read at once
    _made: set[str] = field(default_factory=set)  # reservation pods made here and not yet seen by the watch
    _creating: dict[str, asyncio.Future] = field(default_factory=dict)  # reservation pod → its create under way
    _labels_copied: asyncio.Future | None = None  # whether the apiserver copies a Binding's labels (the probe's)

    def __post_init__(self) -> None:
        self.bind_failures = BindFailures(self.kube)  # the bind back-off's count on the PodGroup
        m = self.metrics
        self._binds = m.counter("binder_binds_total", "Bind attempts by outcome.", ["outcome"])
        self._evictions = m.counter("binder_evictions_total", "Evictions by outcome.", ["action", "outcome"])
        self._reservations = m.counter("binder_reservation_pods_created_total", "Reservation pods created.")
        self._bind_latency = m.histogram("binder_bind_seconds", "One bind: reservation wait included.")

    # ---- plan ------------------------------------------------------------------------------------
    async def on_plan(self, plan: PlanIssued, delivery: Delivery) -> None:
        """Apply the whole plan."""
        work = await self.start_plan(plan, delivery)
        if work is not None:
            await work

    async def start_plan(self, plan: PlanIssued, delivery: Delivery) -> asyncio.Future | None:
        """Start applying the plan; returns its work, under way (None: applied in full before). The next
        plan's reservations and binds may start at once (the planner never plans a pod or GPU another plan
        holds in flight); each plan's events follow its own binds, while the rest of each plan (evictions,
        conditions, annotations) follows the earlier plans' writes to the same objects, and the newest plan's
        queue figures win (`_finish`)."""
        if await self.seen.contains(plan.plan_id):
            return None  # a redelivery of a plan applied in full already
        number = self._started[plan.shard] = self._started.get(plan.shard, 0) + 1
        turns = self._order.take(plan.shard, [op for op in plan.ops if not isinstance(op, (Reserve, Bind, *UNORDERED))])
        binds = asyncio.ensure_future(self._reserve_and_bind(plan))
        work = asyncio.ensure_future(self._finish(plan, number, binds, turns))
        work.add_done_callback(self._retrieved)
        return work

    @staticmethod
    def _retrieved(work: asyncio.Future) -> None:
        if not work.cancelled():
            work.exception()  # retrieved: the consumer (or on_plan) reports it

    async def _reserve_and_bind(self, plan: PlanIssued) -> list[float]:
        """Reservations and binds together, concurrently, bounded by `parallel`: a whole-GPU bind waits for no
        reservation pod, and a fraction's bind waits only for its own GPUs' (a create under way is shared, so
        one new shared GPU gets one create whatever its binds: `SharedGpus._create_reservation`).
        BindResults and decisions are sent without waiting for each (the producer batches them) and awaited
        together at the end."""
        started = time.perf_counter()
        binds = [op for op in plan.ops if isinstance(op, Bind)]
        keeper = None
        try:
            if binds:  # every lease in one read, each checked when its bind goes out
                leases = self._leases[plan.plan_id] = await self.inflight.get_many(plan.shard,
                                                                                  [op.pod_uid for op in binds])
                keeper = asyncio.ensure_future(self._keep_leases(plan.shard, leases))
            await self._concurrently(plan, [*(op for op in plan.ops if isinstance(op, Reserve)), *binds])
            bound = time.perf_counter()
            await self._flush(plan.plan_id)
        finally:
            if keeper is not None:
                keeper.cancel()
            self._leases.pop(plan.plan_id, None)
        return [round(bound - started, 3), round(time.perf_counter() - started, 3)]

    async def _keep_leases(self, shard: str, leases: dict[str, InFlightBind]) -> None:
        """Renew the leases of the plan's binds not done yet, each when half its time is up, for as long as the
        plan's binds take: a plan larger than the binder can apply within one lease (thousands of binds on a busy
        apiserver) keeps its pods and GPUs instead of seeing them planned again under its feet. A lease Redis
        no longer holds as read (removed, or a later plan's) is left to the bind's own check."""
        left_alone: set[str] = set()
        while True:
            kept = [e for uid, e in leases.items() if uid not in left_alone and e.ttl_s > 0]
            if not kept:
                return
            now = time.time()
            due = [e for e in kept if e.expires_at - e.ttl_s / 2 <= now]
            if not due:
                await asyncio.sleep(max(min(e.expires_at - e.ttl_s / 2 for e in kept) - now, LEASE_RENEW_MIN_WAIT_S))
                continue
            try:
                renewed = await self.inflight.renew(shard, due, now_s=now)
            except TransientError as exc:
                log.warning("lease_renewal_failed", shard=shard, leases=len(due), error=str(exc))
                await asyncio.sleep(LEASE_RENEW_MIN_WAIT_S)
                continue
            for entry in renewed:
                if entry.pod_uid in leases:  # its bind may have finished meanwhile
                    leases[entry.pod_uid] = entry
            left_alone.update({e.pod_uid for e in due} - {e.pod_uid for e in renewed})

    async def _finish(self, plan: PlanIssued, number: int, binds: asyncio.Future, turns: list[Turn]) -> None:
        """After the plan's binds: its events at once (what they say holds whatever another plan does); then
        what a later plan may overwrite (conditions, annotations, core pods, evictions, pods' Unschedulable
        condition), each write after the earlier plans' writes to the same object only (`write_order`: a
        slow write to one PodGroup no longer holds every later plan, and with them the consumer's pipeline
        slots), and the queues' status unless a later plan of the shard started already (its figures are
        newer); then the plan counts as applied (marked seen, its offset committable once every earlier
        plan's is)."""
        started, delivered_s = time.perf_counter(), _since(plan.meta.produced_at)
        try:
            phases = await binds
            rest = [op for op in plan.ops if not isinstance(op, Reserve | Bind)]
            await self._concurrently(plan, [*[op for op in rest if isinstance(op, UNORDERED)],
                                            *self._notices.pop(plan.plan_id, [])])
            written = await asyncio.gather(self._concurrently(plan, turns), self._queue_figures(plan, number))
            await self._flush(plan.plan_id)
            phases.append(round(time.perf_counter() - started, 3))
        finally:
            self._order.release(turns)
            self._notices.pop(plan.plan_id, None)
            self.bind_failures.forget(plan.plan_id)
            for task in self._publishing.pop(plan.plan_id, []):
                task.cancel()  # a phase failed: the plan is redelivered, and consumers tolerate duplicates
        await self.seen.mark(plan.plan_id)
        log.info("plan_applied", shard=plan.shard, plan_id=plan.plan_id, revision=plan.revision,
                 reservations=sum(isinstance(op, Reserve) for op in plan.ops),
                 binds=sum(isinstance(op, Bind) for op in plan.ops),
                 other_ops=sorted({type(op).__name__ for op in rest}), queue_status=written[1],
                 phases_s=phases, seconds=round(time.perf_counter() - started, 3), delivered_s=delivered_s)

    async def _queue_figures(self, plan: PlanIssued, number: int) -> bool:
        """The queues' status from this plan, one shard's writes one at a time; left out (False) when a later
        plan of the shard started (it writes newer figures, or wrote them already)."""
        async with self._queue_locks.setdefault(plan.shard, asyncio.Lock()):
            if self._started[plan.shard] > number:
                return False
            await self.queue_statuses(plan)
            return True

    async def _concurrently(self, plan: PlanIssued, ops: list) -> None:
        """The ops at once, `parallel` at a time; an op in a `Turn` first waits for its turn (outside the gate:
        a write waiting for another plan's holds no slot)."""
        gate = asyncio.Semaphore(self.parallel)

        async def one(op) -> None:
            async with op if isinstance(op, Turn) else Turn(op) as turn:
                async with gate:
                    await self.apply(plan, turn.op)

        await asyncio.gather(*(one(op) for op in ops))

    async def apply(self, plan: PlanIssued, op) -> None:
        """One op of the plan (or a BindNotice), by its type (`APPLY`); an op this binder does not know is left."""
        handler = APPLY.get(type(op))
        if handler is not None:
            await handler(self, plan, op)

    async def _reserve(self, plan: PlanIssued, op: Reserve) -> None:
        await self.ensure_reservation(op.node, op.gpu_group, compute_mode=op.compute_mode)

    async def _bind_notice(self, plan: PlanIssued, op: BindNotice) -> None:
        await self.event("Pod", op.pod, op.reason, op.message, op.type, uid=op.pod_uid)

    async def _pipelined(self, plan: PlanIssued, op: Pipeline) -> None:
        # the plan's text (a plan from before it carried one: the same text, made here)
        await self.event("Pod", op.pod, "Pipelined", op.message or reasons.pipelined_event(op.pod, op.node), "Normal")

    async def _condition(self, plan: PlanIssued, op: SetCondition) -> None:
        await self.set_condition(op)

    async def _clear_condition(self, plan: PlanIssued, op: ClearCondition) -> None:
        await self.patch_podgroup(op.pod_group, cleared_condition_patch(op), status=True)

    async def _core_pods(self, plan: PlanIssued, op: SetCorePods) -> None:
        await self.patch_podgroup(op.pod_group, core_pods_patch(op), status=True)

    async def _annotate(self, plan: PlanIssued, op: Annotate) -> None:
        # a PodGroup gone meanwhile, or a bare pod's not made yet (the planner leaves those stamps out when its
        # snapshot shows it; the podgrouper creates it after the bind, with the stamp), is no news
        await self.patch_podgroup(op.pod_group, annotation_patch(op), missing_ok=True)

    async def _podgroup_event(self, plan: PlanIssued, op: PodGroupEvent) -> None:
        await self.event("PodGroup", op.pod_group, op.reason, op.message, op.type)

    async def _pod_event(self, plan: PlanIssued, op: PodEvent) -> None:
        if op.reason == "Unschedulable":  # one read of the pod serves the event and the condition
            current = await self._get(k.PODS, op.pod)
            if current is not None:
                await self.event("Pod", op.pod, op.reason, op.message, op.type, uid=text(current, "metadata", "uid"))
                await self.pod_unschedulable(op.pod, op.message, current)
        else:
            await self.event("Pod", op.pod, op.reason, op.message, op.type)

    async def bind(self, plan: PlanIssued, op: Bind) -> None:
        try:
            await self._bind(plan, op)
        finally:  # done, either way: its lease is renewed no more (`_keep_leases`)
            leases = self._leases.get(plan.plan_id)
            if leases is not None:
                leases.pop(op.pod_uid, None)

    async def _bind(self, plan: PlanIssued, op: Bind) -> None:
        leases = self._leases.get(plan.plan_id)
        entry = live(leases.get(op.pod_uid)) if leases is not None else await self.inflight.get(plan.shard, op.pod_uid)
        if entry is None or entry.plan_id != plan.plan_id:
            log.info("bind_skipped_stale", pod=op.pod, plan_id=plan.plan_id,
                     lease=entry.plan_id if entry else None)
            return
        started = time.perf_counter()
        try:
            if not await self._write_bind(plan, op):
                return  # the lease ran out meanwhile: a newer plan may have used these GPUs
        except ConflictError:
            current = await self._get(k.PODS, op.pod)
            if current is not None and value_at(current, "spec", "nodeName") == op.node:
                await self._bound(plan, op, started)  # a replay of a bind that already happened
                return
            await self._bind_failed(plan, op, "pod is already bound to another node or was replaced")
            return
        except (PermanentError, TransientError, TimeoutError, FractionRefused) as exc:
            await self._bind_failed(plan, op, str(exc) or type(exc).__name__)
            return
        await self._bound(plan, op, started)

    async def _write_bind(self, plan: PlanIssued, op: Bind) -> bool:
        """A fraction's writes (`prepare_fraction`), then the binding, which carries the fraction's labels and
        annotations unless they were patched (`binding_metadata`); False: not bound, the lease ran out."""
        route, metadata, bound = "patch", None, False
        namespace, name = ko.split(op.pod)
        try:
            if op.gpu_groups:
                # may wait for the node agent up to the reservation timeout
                route, metadata = await self.prepare_fraction(op, self.sharing_mode_of(plan.shard))
                if not await self._still_leased(plan, op):
                    return False
            await self.kube.create(k.PODS, ko.binding(op.pod, op.node, op.pod_group,
                                                      None if route == "patch" else metadata),
                                   namespace=namespace, name=name, subresource="binding", answer=False)
            bound = True
        finally:
            if route == "probe" and metadata is not None:
                await self.settle_probe(op, metadata, bound)
        return True

    async def _still_leased(self, plan: PlanIssued, op: Bind) -> bool:
        entry = await self.inflight.get(plan.shard, op.pod_uid)
        if entry is None or entry.plan_id != plan.plan_id:
            log.info("bind_skipped_lease_expired", pod=op.pod, plan_id=plan.plan_id)
            return False
        return True

    async def _bound(self, plan: PlanIssued, op: Bind, started: float) -> None:
        self._binds.labels("bound").inc()
        self._bind_latency.observe(time.perf_counter() - started)
        self._result(plan, op, ok=True)
        self._decision("bound", plan, op.pod, {"node": op.node, "podGroup": op.pod_group})
        if op.gpu_groups:
            self._decision("gpu-shared", plan, op.pod, {"node": op.node, "gpuGroups": list(op.gpu_groups),
                                                        "fraction": op.fraction})
        self._notice(plan, BindNotice(op.pod, op.pod_uid, "Scheduled",
                                      reasons.scheduled_event(op.pod, op.node, plan.shard), "Normal"))

    async def _bind_failed(self, plan: PlanIssued, op: Bind, error: str) -> None:
        self._binds.labels("failed").inc()
        log.warning("bind_failed", pod=op.pod, node=op.node, error=error)
        failures = await self.bind_failures.count(plan.plan_id, op.pod_group, error)  # before the lease goes
        await self.inflight.remove(plan.shard, [op.pod_uid])
        self._result(plan, op, ok=False, error=error)
        self._decision("bind-failed", plan, op.pod, {"node": op.node, "error": error, "podGroup": op.pod_group,
                                                     "bindFailures": failures})
        self._notice(plan, BindNotice(op.pod, op.pod_uid, "BindingError",
                                      reasons.binding_error_event(op.pod, op.node, error), "Warning"))

    def _notice(self, plan: PlanIssued, notice: BindNotice) -> None:
        self._notices.setdefault(plan.plan_id, []).append(notice)

    # ---- shared GPUs -----------------------------------------------------------------------------


def _since(produced_at: str) -> float | None:
    """Seconds from when the plan was made (its header's time) to now: when a plan starts, how long it took to
    reach the binder (None: a header without a readable time)."""
    try:
        return round(time.time() - parse_time(produced_at, "meta.produced_at").timestamp(), 3)
    except IngestError:
        return None


# how each op of a plan is applied
APPLY: dict[type, Callable[[Binder, PlanIssued, Any], Awaitable[None]]] = {
    Bind: Binder.bind, Reserve: Binder._reserve, BindNotice: Binder._bind_notice, Pipeline: Binder._pipelined,
    Evict: Binder.evict, SetCondition: Binder._condition, ClearCondition: Binder._clear_condition,
    SetCorePods: Binder._core_pods, Annotate: Binder._annotate, PodGroupEvent: Binder._podgroup_event,
    PodEvent: Binder._pod_event,
}

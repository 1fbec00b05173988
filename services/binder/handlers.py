"""Plan → Kubernetes API calls, idempotently: a replayed plan never binds twice and never creates a
second reservation pod for one shared GPU.

Binds are guarded by their in-flight entry (the planner's lease for that pod): a bind whose entry is
gone or names another plan is stale and skipped. A bind that fails removes its entry, so the pod is
planned again. Evictions go through the Eviction API (PDBs respected) unless eviction_mode=delete.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from services.binder import fractions
from services.binder import kubeobjects as ko
from services.binder.bind_failures import BindFailures
from services.binder.fractions import FractionRefused
from services.binder.reservation_watch import ReservationWatch
from services.binder.reservations import stale_reservations
from shoal.adapters import kube as k
from shoal.adapters.dedup import SeenIds
from shoal.adapters.inflight import InFlight, live
from shoal.adapters.kafka import Delivery, Publisher
from shoal.core.fields import mapping, text, value_at
from shoal.core.kai_labels import GPU_GROUP_LABEL, RECEIVED_TYPE, gpu_group_labels
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
from shoal.core.sharing_mode import DEFAULT_MODE, DISABLED, disabled_message
from shoal.errors import ConflictError, NotFoundError, PermanentError, TransientError
from shoal.logging import get_logger
from shoal.messages import topics
from shoal.messages.base import new_meta
from shoal.messages.decisions import decision
from shoal.messages.plan import BindResult, PlanIssued
from shoal.metrics import Metrics

log = get_logger("services.binder")

CORE_EVENTS = k.Resource("", "v1", "events", "Event")


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
class Binder:
    kube: k.Kube
    inflight: InFlight
    seen: SeenIds
    bus: Publisher
    metrics: Metrics
    topic_prefix: str = ""
    reservation_namespace: str = "kai-resource-reservation"
    reservation_timeout_s: float = 40.0
    reservation_image: str = ko.RESERVATION_IMAGE
    eviction_mode: str = "evict"  # evict (Eviction API, PDBs respected) | delete (KAI's behaviour)
    event_dedupe_s: float = 60.0
    reservation_grace_s: float = 30.0
    parallel: int = 64  # API calls in flight per plan phase
    reservations: ReservationWatch | None = None  # GPU ids of reservation pods from a watch (None: read the pod)
    sharing_mode_of: Callable[[str], str] = lambda shard: DEFAULT_MODE  # SHOAL_[POOL_]GPU_SHARING_MODE(S)
    _events: dict[tuple, float] = field(default_factory=dict)
    _queue_status: dict[str, dict] = field(default_factory=dict)
    _publishing: dict[str, list[asyncio.Task]] = field(default_factory=dict)  # plan id → sends not awaited yet
    _notices: dict[str, list[BindNotice]] = field(default_factory=dict)  # plan id → events of its binds
    _applying: dict[str, asyncio.Future] = field(default_factory=dict)  # shard → its latest plan under way
    _leases: dict[str, dict] = field(default_factory=dict)  # plan id → its binds' leases, read at once
    _made: set[str] = field(default_factory=set)  # reservation pods made here and not yet seen by the watch

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
        conditions, annotations, queue status) runs in plan order per shard (`_finish`)."""
        if await self.seen.contains(plan.plan_id):
            return None  # a redelivery of a plan applied in full already
        binds = asyncio.ensure_future(self._reserve_and_bind(plan))
        work = asyncio.ensure_future(self._finish(plan, binds, self._applying.get(plan.shard)))
        self._applying[plan.shard] = work
        work.add_done_callback(lambda done: self._forget(plan.shard, done))
        return work

    def _forget(self, shard: str, work: asyncio.Future) -> None:
        if self._applying.get(shard) is work:
            del self._applying[shard]
        if not work.cancelled():
            work.exception()  # retrieved: the consumer (or on_plan) reports it

    async def _reserve_and_bind(self, plan: PlanIssued) -> list[float]:
        """Reservations first, then binds; within a phase ops are independent of each other (two binds into
        one new shared GPU both find its single reservation pod), so they run concurrently, bounded by
        `parallel`. BindResults and decisions are sent without waiting for each (the producer batches them)
        and awaited together at the end of each phase."""
        started, phases = time.perf_counter(), []
        binds = [op for op in plan.ops if isinstance(op, Bind)]
        try:
            for phase in ([op for op in plan.ops if isinstance(op, Reserve)], binds):
                if phase is binds and binds:  # every lease in one read, each checked when its bind goes out
                    self._leases[plan.plan_id] = await self.inflight.get_many(plan.shard,
                                                                             [op.pod_uid for op in binds])
                await self._concurrently(plan, phase)
                await self._flush(plan.plan_id)
                phases.append(round(time.perf_counter() - started, 3))
        finally:
            self._leases.pop(plan.plan_id, None)
        return phases

    async def _finish(self, plan: PlanIssued, binds: asyncio.Future, before: asyncio.Future | None) -> None:
        """After the plan's binds: its events at once (what they say holds whatever another plan does); then,
        after the previous plan's rest, what a later plan may overwrite (conditions, annotations, core pods,
        evictions, pods' Unschedulable condition) and the queues' status, skipped when a later plan
        of the shard is under way already (its figures are newer); then the plan counts as applied (marked
        seen, its offset committable). Waiting on the previous plan holds a pipeline slot: only what needs the
        order waits."""
        started = time.perf_counter()
        try:
            phases = await binds
            rest = [op for op in plan.ops if not isinstance(op, Reserve | Bind)]
            await self._concurrently(plan, [*[op for op in rest if isinstance(op, UNORDERED)],
                                            *self._notices.pop(plan.plan_id, [])])
            if before is not None:
                await asyncio.wait([before])  # its failure is its own (the consumer rewinds to it)
            later = self._applying.get(plan.shard) not in (None, asyncio.current_task())
            await asyncio.gather(self._concurrently(plan, [op for op in rest if not isinstance(op, UNORDERED)]),
                                 *(() if later else (self.queue_statuses(plan),)))
            await self._flush(plan.plan_id)
            phases.append(round(time.perf_counter() - started, 3))
        finally:
            self._notices.pop(plan.plan_id, None)
            self.bind_failures.forget(plan.plan_id)
            for task in self._publishing.pop(plan.plan_id, []):
                task.cancel()  # a phase failed: the plan is redelivered, and consumers tolerate duplicates
        await self.seen.mark(plan.plan_id)
        log.info("plan_applied", shard=plan.shard, plan_id=plan.plan_id, revision=plan.revision,
                 reservations=sum(isinstance(op, Reserve) for op in plan.ops),
                 binds=sum(isinstance(op, Bind) for op in plan.ops),
                 other_ops=sorted({type(op).__name__ for op in rest}), queue_status=not later,
                 phases_s=phases, seconds=round(time.perf_counter() - started, 3))

    async def queue_statuses(self, plan: PlanIssued) -> None:
        """Queue.status from the plan's figures, written only when it changed. Figures are per shard: a queue
        used in several node pools shows the figures of the latest plan that involved it. Queues are written
        concurrently, bounded by `parallel`."""
        gate = asyncio.Semaphore(self.parallel)

        async def write(name: str, body: dict) -> None:
            async with gate:
                await self._quietly(self.kube.patch(k.QUEUES, name, {"status": body}, subresource="status", answer=False))
            self._queue_status[name] = body

        changed = {}
        for figures in plan.queues:
            if not (figures.gpu.request or figures.cpu.request or figures.memory.request
                    or figures.gpu.allocated or figures.cpu.allocated or figures.memory.allocated):
                continue
            body = ko.queue_status(figures)
            if self._queue_status.get(figures.name) != body:
                changed[figures.name] = body
        await asyncio.gather(*(write(name, body) for name, body in changed.items()))

    async def _concurrently(self, plan: PlanIssued, ops: list) -> None:
        gate = asyncio.Semaphore(self.parallel)

        async def one(op) -> None:  # type: ignore[no-untyped-def]
            async with gate:
                await self.apply(plan, op)

        await asyncio.gather(*(one(op) for op in ops))

    async def apply(self, plan: PlanIssued, op) -> None:
        if isinstance(op, Bind):
            await self.bind(plan, op)
        elif isinstance(op, Reserve):
            await self.ensure_reservation(op.node, op.gpu_group, compute_mode=op.compute_mode)
        elif isinstance(op, BindNotice):
            await self.event("Pod", op.pod, op.reason, op.message, op.type, uid=op.pod_uid)
        elif isinstance(op, Pipeline):
            await self.event("Pod", op.pod, "Pipelined", f"Pod {op.pod} was pipelined to node {op.node}", "Normal")
        elif isinstance(op, Evict):
            await self.evict(plan, op)
        elif isinstance(op, SetCondition):
            await self.set_condition(op)
        elif isinstance(op, ClearCondition):
            await self.patch_podgroup(op.pod_group, {"status": {"schedulingConditions": []}}, status=True)
        elif isinstance(op, SetCorePods):
            await self.patch_podgroup(op.pod_group, {"status": {"schedulingState": {"corePods": list(op.pods)}}},
                                      status=True)
        elif isinstance(op, Annotate):
            await self.patch_podgroup(op.pod_group, {"metadata": {"annotations": {op.key: op.value}}})
        elif isinstance(op, PodGroupEvent):
            await self.event("PodGroup", op.pod_group, op.reason, op.message, op.type)
        elif isinstance(op, PodEvent):
            if op.reason == "Unschedulable":  # one read of the pod serves the event and the condition
                current = await self._get(k.PODS, op.pod)
                if current is not None:
                    await self.event("Pod", op.pod, op.reason, op.message, op.type,
                                     uid=text(current, "metadata", "uid"))
                    await self.pod_unschedulable(op.pod, op.message, current)
            else:
                await self.event("Pod", op.pod, op.reason, op.message, op.type)

    # ---- binds -----------------------------------------------------------------------------------
    async def bind(self, plan: PlanIssued, op: Bind) -> None:
        leases = self._leases.get(plan.plan_id)
        entry = live(leases.get(op.pod_uid)) if leases is not None else await self.inflight.get(plan.shard, op.pod_uid)
        if entry is None or entry.plan_id != plan.plan_id:
            log.info("bind_skipped_stale", pod=op.pod, plan_id=plan.plan_id,
                     lease=entry.plan_id if entry else None)
            return
        started = time.perf_counter()
        namespace, name = ko.split(op.pod)
        try:
            if op.gpu_groups:
                # may wait for the node agent up to the reservation timeout
                await self.prepare_fraction(op, self.sharing_mode_of(plan.shard))
                if not await self._still_leased(plan, op):
                    return  # the lease ran out meanwhile: a newer plan may have used these GPUs
            await self.kube.create(k.PODS, ko.binding(op.pod, op.node), namespace=namespace, name=name,
                                   subresource="binding", answer=False)
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

    async def _still_leased(self, plan: PlanIssued, op: Bind) -> bool:
        entry = await self.inflight.get(plan.shard, op.pod_uid)
        if entry is None or entry.plan_id != plan.plan_id:
            log.info("bind_skipped_lease_expired", pod=op.pod, plan_id=plan.plan_id)
            return False
        return True

    async def _bound(self, plan: PlanIssued, op: Bind, started: float) -> None:
        self._binds.labels("bound").inc()
        self._bind_latency.observe(time.perf_counter() - started)
        pool = plan.shard
        self._result(plan, op, ok=True)
        self._decision("bound", plan, op.pod, {"node": op.node, "podGroup": op.pod_group})
        if op.gpu_groups:
            self._decision("gpu-shared", plan, op.pod, {"node": op.node, "gpuGroups": list(op.gpu_groups),
                                                        "fraction": op.fraction})
        self._notice(plan, BindNotice(op.pod, op.pod_uid, "Scheduled",
                                      f"Successfully assigned pod {op.pod} to node {op.node} at node-pool {pool}",
                                      "Normal"))

    async def _bind_failed(self, plan: PlanIssued, op: Bind, error: str) -> None:
        self._binds.labels("failed").inc()
        log.warning("bind_failed", pod=op.pod, node=op.node, error=error)
        failures = await self.bind_failures.count(plan.plan_id, op.pod_group, error)  # before the lease goes
        await self.inflight.remove(plan.shard, [op.pod_uid])
        self._result(plan, op, ok=False, error=error)
        self._decision("bind-failed", plan, op.pod, {"node": op.node, "error": error, "podGroup": op.pod_group,
                                                     "bindFailures": failures})
        self._notice(plan, BindNotice(op.pod, op.pod_uid, "BindingError",
                                      f"Failed to bind pod {op.pod} to node {op.node}: {error}", "Warning"))

    def _notice(self, plan: PlanIssued, notice: BindNotice) -> None:
        self._notices.setdefault(plan.plan_id, []).append(notice)

    # ---- shared GPUs -----------------------------------------------------------------------------
    async def prepare_fraction(self, op: Bind, mode: str = DEFAULT_MODE) -> None:
        """Reservation pod per group (created once), then what the GPU sharing mode passes the GPU by (the GPU
        ConfigMaps, or NvFractions' annotations: `fractions`) and the pod's labels and annotations."""
        if mode == DISABLED:
            raise FractionRefused(disabled_message(op.pod))
        # the pod is read while the node agent assigns the reservations' GPUs; the ConfigMap and the pod's
        # labels are independent writes, both done before the binding
        *uuids, pod = await asyncio.gather(*(self.ensure_reservation(op.node, group, wait=True,
                                                                     compute_mode=op.compute_mode)
                                             for group in op.gpu_groups), self._get(k.PODS, op.pod))
        if pod is None:
            raise NotFoundError(f"pod {op.pod} is gone")
        namespace, name = ko.split(op.pod)
        annotations = {RECEIVED_TYPE: op.received_resource_type,
                       **fractions.pod_annotations(pod, op, uuids, mode)}
        writes = []
        if fractions.uses_configmaps(mode):
            capabilities, evar = ko.fraction_configmaps(pod, uuids, op.fraction or "",
                                                        fractions.capabilities_extra(op, mode))
            writes = [self._apply_configmap(capabilities), self._ensure_configmap(evar)]
        await asyncio.gather(*writes, self.kube.patch(k.PODS, name, {"metadata": {
            "labels": {**gpu_group_labels(op.gpu_groups), ko.SHARED_LABEL: "true"},
            "annotations": annotations}}, namespace=namespace, answer=False))

    async def ensure_reservation(self, node: str, group: str, *, wait: bool = False,
                                 compute_mode: str | None = None) -> str:
        name = ko.reservation_name(node, group)
        ns = self.reservation_namespace
        if not self._reservation_exists(name):  # a plan's Reserve made it: its binds post no second create
            await self._create_reservation(node, group, compute_mode)
        if not wait:
            return ""
        deadline = time.monotonic() + self.reservation_timeout_s
        watch = self.reservations
        # the pod itself is read when no synced watch serves it, and after each second without news
        read_at = time.monotonic() + 1.0 if watch is not None and watch.synced else 0.0
        while True:
            change = watch.next_change() if watch is not None else None  # before looking: none is missed
            uuid = watch.uuids.get(name) if watch is not None else None
            if uuid is None and (watch is None or not watch.synced or time.monotonic() >= read_at):
                pod = await self._get(k.PODS, f"{ns}/{name}")
                if pod is None:  # gone since it was made (or taken to exist): made again
                    await self._create_reservation(node, group, compute_mode)
                uuid = mapping(pod, "metadata", "annotations").get(ko.RESERVE_ANNOTATION)
                read_at = time.monotonic() + 1.0
            if uuid:
                return uuid
            if time.monotonic() >= deadline:
                await self._delete_quietly(f"{ns}/{name}")
                raise TimeoutError("Reached timeout while waiting for GPU reservation pod to be allocated "
                                   f"({ns}/{name} on node {node})")
            if watch is not None and watch.synced:
                await watch.changed(timeout_s=1.0, change=change)
            else:
                await asyncio.sleep(0.2)

    def _reservation_exists(self, name: str) -> bool:
        """The reservation pod exists as far as this binder knows: the synced watch has it, or this process
        made it and the watch has not shown it yet (nor its deletion)."""
        watch = self.reservations
        if watch is not None and watch.synced and name in watch.pods:
            self._made.discard(name)
            return True
        return name in self._made

    async def _create_reservation(self, node: str, group: str, compute_mode: str | None) -> None:
        name = ko.reservation_name(node, group)
        ns = self.reservation_namespace
        try:
            await self.kube.create(k.PODS, ko.reservation_pod(
                node, group, ns, image=self.reservation_image,
                annotations=fractions.reservation_annotations(compute_mode)), namespace=ns, answer=False)
            self._reservations.inc()
            log.info("reservation_pod_created", node=node, gpu_group=group, pod=f"{ns}/{name}")
        except ConflictError:
            pass  # it exists: one reservation pod per shared GPU, whatever the replays
        self._made.add(name)

    async def sync_reservations(self) -> int:
        """Delete the reservation pods of shared GPUs no pod uses any more; returns how many. The reservation pods
        come from the reservation watch once it is synced (listed otherwise)."""
        watch = self.reservations
        if watch is not None and watch.synced:  # the reservation namespace's watch has them all already
            reservations = [pod for pod in watch.pods.values()
                            if ((pod.get("metadata") or {}).get("labels") or {}).get("app") == ko.RESERVATION_APP]
        else:
            reservations, _ = await self.kube.list(k.PODS, namespace=self.reservation_namespace,
                                                   label_selector=f"app={ko.RESERVATION_APP}")
        now = datetime.now(UTC)
        if not stale_reservations(reservations, (), set(), now, self.reservation_grace_s, check_groups=False):
            return 0  # none old enough to release: the cluster-wide list of shared pods is not needed
        shared, _ = await self.kube.list(k.PODS, label_selector=f"{ko.SHARED_LABEL}=true")
        stale = stale_reservations(reservations, shared, await self.inflight.groups_in_flight(),
                                   now, self.reservation_grace_s)
        for pod in stale:
            await self._delete_quietly(f"{self.reservation_namespace}/{pod['metadata']['name']}")
            log.info("reservation_pod_released", pod=pod["metadata"]["name"],
                     gpu_group=pod["metadata"]["labels"].get(GPU_GROUP_LABEL))
        return len(stale)

    async def _ensure_configmap(self, cm: dict) -> None:
        """Create it unless it exists (its data may be the node agent's)."""
        try:
            await self.kube.create(k.CONFIGMAPS, cm, namespace=cm["metadata"]["namespace"], answer=False)
        except ConflictError:
            pass

    async def _apply_configmap(self, cm: dict) -> None:
        meta = cm["metadata"]
        try:
            await self.kube.create(k.CONFIGMAPS, cm, namespace=meta["namespace"], answer=False)
        except ConflictError:
            await self.kube.patch(k.CONFIGMAPS, meta["name"], {"data": cm["data"]}, namespace=meta["namespace"], answer=False)

    # ---- evictions -------------------------------------------------------------------------------
    async def evict(self, plan: PlanIssued, op: Evict) -> None:
        namespace, name = ko.split(op.pod)
        # read the victim's PodGroup before the eviction: a per-pod group (bare pod, ReplicaSet) is owned by
        # its pod and garbage-collected with it, and the Evict event must still find its object
        group = await self._get(k.PODGROUPS, op.pod_group) if op.pod_group else None
        try:
            if self.eviction_mode == "delete":
                await self.kube.delete(k.PODS, name, namespace=namespace)
            else:
                await self.kube.create(k.PODS, ko.eviction(op.pod), namespace=namespace, name=name,
                                       subresource="eviction", idempotent=True, answer=False)
        except NotFoundError:
            self._evictions.labels(op.action, "gone").inc()
            return
        except TransientError as exc:
            # 429 from the Eviction API: a PodDisruptionBudget blocks it; the victim no longer counts as
            # releasing, and the next cycle searches again
            self._evictions.labels(op.action, "blocked").inc()
            log.warning("eviction_blocked", pod=op.pod, action=op.action, error=str(exc))
            await self.inflight.remove(plan.shard, [op.pod_uid])
            return
        self._evictions.labels(op.action, "evicted").inc()
        by_ns, by_name = ko.split(op.by)
        if op.pod_group:
            await self.event("PodGroup", op.pod_group, "Evict", op.message, "Normal", annotations={
                "num-evicted-pods": "1", "evictor-action-type": op.action,
                "evictor-pod-group-name": by_name, "evictor-pod-group-namespace": by_ns},
                uid=text(group, "metadata", "uid") if group else None)

    # ---- status ----------------------------------------------------------------------------------
    async def set_condition(self, op: SetCondition) -> None:
        current = await self._get(k.PODGROUPS, op.pod_group)
        if current is None:
            log.info("podgroup_missing_for_condition", pod_group=op.pod_group, reason=op.reason)
            return
        existing = (current.get("status") or {}).get("schedulingConditions") or []
        if existing and existing[0].get("message") == op.message and \
                ((existing[0].get("reasons") or [{}])[0].get("reason") or op.reason) == op.reason:
            return  # unchanged (same reason and message): not rewritten, its transition time kept
        transition = str(int(existing[0].get("transitionID", "0")) + 1) if existing else "0"
        condition = ko.scheduling_condition(op, transition, ko.utc_now())
        await self.patch_podgroup(op.pod_group, {"status": {"schedulingConditions": [condition]}}, status=True)

    async def pod_unschedulable(self, pod: str, message: str, current: dict | None = None) -> None:
        namespace, name = ko.split(pod)
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                     "lastTransitionTime": ko.utc_now()}
        current = current if current is not None else await self._get(k.PODS, pod)
        if current is None:
            return
        for c in (current.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("message") == message:
                return
        await self._quietly(self.kube.patch(k.PODS, name, {"status": {"conditions": [condition]}},
                                            namespace=namespace, subresource="status",
                                            content_type="application/strategic-merge-patch+json", answer=False))

    async def patch_podgroup(self, key: str, body: dict, *, status: bool = False) -> None:
        namespace, name = ko.split(key)
        await self._quietly(self.kube.patch(k.PODGROUPS, name, body, namespace=namespace,
                                            subresource="status" if status else None, answer=False))

    # ---- events, results -------------------------------------------------------------------------
    async def event(self, kind: str, key: str, reason: str, message: str, event_type: str, *,
                    annotations: dict | None = None, uid: str | None = None) -> None:
        """A core/v1 event about a pod or PodGroup; `uid` given: the object was read already (it may be gone)."""
        now = time.monotonic()
        dedupe = (kind, key, reason, message)
        if annotations is None and now - self._events.get(dedupe, -1e9) < self.event_dedupe_s:
            return
        self._events[dedupe] = now
        if len(self._events) > 50_000:
            self._events = {d: t for d, t in self._events.items() if now - t < self.event_dedupe_s}
        if uid is None:
            obj = await self._get(k.PODS if kind == "Pod" else k.PODGROUPS, key)
            if obj is None:
                return
            uid = text(obj, "metadata", "uid")
        namespace, name = ko.split(key)
        api_version = "v1" if kind == "Pod" else "scheduling.run.ai/v2alpha2"
        body = ko.core_event(kind, namespace, name, uid, reason, message, event_type,
                             api_version=api_version, annotations=annotations)
        await self._quietly(self.kube.create(CORE_EVENTS, body, namespace=namespace, answer=False))

    def _result(self, plan: PlanIssued, op: Bind, *, ok: bool, error: str = "") -> None:
        result = BindResult(meta=new_meta("binder", revision=plan.revision), shard=plan.shard,
                            plan_id=plan.plan_id, pod=op.pod, node=op.node, ok=ok, error=error)
        self._send(plan, topics.BIND_RESULTS.full(self.topic_prefix), result)

    def _decision(self, kind: str, plan: PlanIssued, subject: str, data: dict) -> None:
        event = decision(kind, source=f"shoal/binder/{plan.shard}", subject=subject, shard=plan.shard,
                         plan_id=plan.plan_id, revision=plan.revision, data=data)
        self._send(plan, topics.DECISIONS.full(self.topic_prefix), event)

    def _send(self, plan: PlanIssued, topic: str, message) -> None:  # type: ignore[no-untyped-def]
        """Start a publish now; `_flush` awaits it with the rest of the plan's phase."""
        task = asyncio.ensure_future(self.bus.publish(topic, message, key=plan.shard))
        self._publishing.setdefault(plan.plan_id, []).append(task)

    async def _flush(self, plan_id: str) -> None:
        """Wait for every publish the plan started; the first failure is raised after all have settled."""
        tasks = self._publishing.pop(plan_id, [])
        if not tasks:
            return
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _get(self, resource: k.Resource, key: str) -> dict | None:
        namespace, name = ko.split(key)
        try:
            return await self.kube.get(resource, name, namespace=namespace or None)
        except NotFoundError:
            return None

    async def _delete_quietly(self, key: str) -> None:
        namespace, name = ko.split(key)
        if namespace == self.reservation_namespace:
            self._made.discard(name)
        await self._quietly(self.kube.delete(k.PODS, name, namespace=namespace, body={"gracePeriodSeconds": 0}))

    async def _quietly(self, call) -> None:
        """Status and event writes must not fail a plan: a gone object or a rejected patch is logged."""
        try:
            await call
        except (NotFoundError, PermanentError, ConflictError) as exc:
            log.info("status_write_skipped", error=str(exc))

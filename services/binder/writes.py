"""The binder's status and event writes: PodGroup conditions and status, a pod's Unschedulable condition, the
queues' status, core/v1 events (de-duplicated); reads of one object. None of them fails a plan: a gone object
or a rejected patch is logged (`_quietly`)."""

from __future__ import annotations

import asyncio
import time

from services.binder import kubeobjects as ko
from shoal.adapters import kube as k
from shoal.core.fields import text
from shoal.core.plan import SetCondition
from shoal.core.plan_effects import condition_patch, next_condition
from shoal.errors import ConflictError, NotFoundError, PermanentError
from shoal.logging import get_logger
from shoal.messages.plan import PlanIssued

log = get_logger("services.binder")

CORE_EVENTS = k.Resource("", "v1", "events", "Event")


class Writes:
    """Mixed into `Binder`, whose fields these are."""

    kube: k.Kube
    parallel: int
    event_dedupe_s: float
    _events: dict[tuple, float]
    queue_status_interval_s: float
    _queue_status: dict[str, dict]  # queue → the status last written
    _queue_due: dict[str, dict]  # queue → newer figures, waiting for its interval
    _queue_written_at: dict[str, float]  # queue → when its status was last written (monotonic)
    _queue_timer: asyncio.Future | None
    _queue_shard: dict[str, str]  # queue → the shard whose plan last gave it a request or an allocation

    async def queue_statuses(self, plan: PlanIssued) -> None:
        """Queue.status from the plan's figures, written only when it changed, at most once per
        `queue_status_interval_s` per queue: figures that change again within that time wait and the newest
        are written when it is up (a steady stream of plans moves the figures every plan; each write is an
        etcd write and a watch event for every client of Queues). Figures are per shard: a queue used in
        several node pools shows the figures of the latest plan that involved it; a plan in which a queue
        has nothing (no request, nothing allocated) writes its zeros only over figures its own node pool
        wrote (the queue's last pod there finished), never over another pool's."""
        for figures in plan.queues:
            if any(r.request or r.allocated for r in (figures.gpu, figures.cpu, figures.memory)):
                self._queue_shard[figures.name] = plan.shard
            elif self._queue_shard.get(figures.name) != plan.shard:
                continue
            body = ko.queue_status(figures)
            if self._queue_status.get(figures.name) == body:
                self._queue_due.pop(figures.name, None)  # back to what is written: nothing to write
            else:
                self._queue_due[figures.name] = body
        await self.write_due_queues()

    async def write_due_queues(self) -> None:
        """Write the waiting Queue statuses whose interval is up, `parallel` at a time; the others are written
        by a timer when theirs is."""
        now = time.monotonic()
        ready = {name: body for name, body in self._queue_due.items()
                 if now - self._queue_written_at.get(name, -1e18) >= self.queue_status_interval_s}
        for name in ready:
            del self._queue_due[name]
            self._queue_written_at[name] = now
        gate = asyncio.Semaphore(self.parallel)

        async def write(name: str, body: dict) -> None:
            async with gate:
                await self._quietly(self.kube.patch(k.QUEUES, name, {"status": body}, subresource="status", answer=False))
            self._queue_status[name] = body

        await asyncio.gather(*(write(name, body) for name, body in ready.items()))
        if self._queue_due and (self._queue_timer is None or self._queue_timer.done()):
            wait = min(self._queue_written_at.get(name, -1e18) for name in self._queue_due) \
                + self.queue_status_interval_s - time.monotonic()
            self._queue_timer = asyncio.ensure_future(self._write_queues_later(max(0.0, wait)))

    async def _write_queues_later(self, wait_s: float) -> None:
        await asyncio.sleep(wait_s)
        self._queue_timer = None
        await self.write_due_queues()

    async def set_condition(self, op: SetCondition) -> None:
        current = await self._get(k.PODGROUPS, op.pod_group)
        if current is None:
            log.info("podgroup_missing_for_condition", pod_group=op.pod_group, reason=op.reason)
            return
        condition = next_condition((current.get("status") or {}).get("schedulingConditions") or [], op, ko.utc_now())
        if condition is not None:  # None: unchanged, not rewritten (its transition time kept)
            await self.patch_podgroup(op.pod_group, condition_patch(condition), status=True)

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

    async def patch_podgroup(self, key: str, body: dict, *, status: bool = False, missing_ok: bool = False) -> None:
        """`missing_ok`: a PodGroup not there (yet) is expected, not logged."""
        namespace, name = ko.split(key)
        await self._quietly(self.kube.patch(k.PODGROUPS, name, body, namespace=namespace,
                                            subresource="status" if status else None, answer=False),
                            missing_ok=missing_ok)

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

    async def _get(self, resource: k.Resource, key: str, *, cached: bool = False) -> dict | None:
        """One object, None when it is gone; `cached`: from the apiserver's watch cache (no etcd read), where
        one it has not seen yet is read again from etcd."""
        namespace, name = ko.split(key)
        try:
            return await self.kube.get(resource, name, namespace=namespace or None, cached=cached)
        except NotFoundError:
            return await self._get(resource, key) if cached else None

    async def _quietly(self, call, *, missing_ok: bool = False) -> None:
        """Status and event writes must not fail a plan: a gone object or a rejected patch is logged (a gone
        one not, with `missing_ok`)."""
        try:
            await call
        except NotFoundError as exc:
            if not missing_ok:
                log.info("status_write_skipped", error=str(exc))
        except (PermanentError, ConflictError) as exc:
            log.info("status_write_skipped", error=str(exc))

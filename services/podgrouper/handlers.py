"""Pods in, PodGroups out: for each pod with Shoal's scheduler name, read its owner chain, group it with the
pure rules (`shoal.core.ingest.grouping`), create or update the PodGroup, then annotate/label the pod.

Idempotent (everything is compared first; re-running changes nothing), tolerant of 409 (re-read, compare
again), safe to kill at any time (the next start re-lists every pod and converges). A pod whose owner cannot
be read gets a `PodGrouperWarning` event and is retried with backoff; nothing else stops.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from services.podgrouper import translate as t
from shoal.adapters import kube as k
from shoal.adapters.kube_watch import ListWatch
from shoal.core.ingest import grouping as rules
from shoal.core.model import ANNOTATION_LAST_START as LAST_START
from shoal.errors import ConflictError, NotFoundError, PermanentError, ShoalError, TransientError
from shoal.logging import get_logger
from shoal.metrics import Metrics

log = get_logger("services.podgrouper")

CORE_EVENTS = k.Resource("", "v1", "events", "Event")
MAX_OWNER_DEPTH = 10
CREATED, PATCHED = "created", "patched"  # what ensure_podgroup wrote ("" when nothing)
DEFERRED = "deferred"  # a pending bare pod's PodGroup and annotation wait for its bind (`reconcile`)
FOLLOWING = "following"  # a bare pod's PodGroup was made before its bind: its bind brings it back (`reconcile`)


class OwnerUnavailable(Exception):
    """An owner in the chain cannot be read (not created yet, its CRD missing, no permission)."""


@dataclass
class PodGrouper:
    kube: k.Kube
    metrics: Metrics
    workers: int = 16  # pods grouped concurrently (bursts of bare pods: the apiserver is the limit)
    retry_initial_s: float = 1.0
    retry_max_s: float = 30.0
    priority_class_ttl_s: float = 30.0
    event_dedupe_s: float = 300.0
    cache_ttl_s: float = 5.0  # owners read and PodGroups found in line are trusted this long (bursts of pods)
    # the longest a pending bare pod's PodGroup and annotation wait for its bind (the scheduler's verdict that it
    # cannot be placed now ends the wait at once: `t.scheduling_declined`)
    bare_annotate_delay_s: float = 30.0
    stamp_check_delay_s: float = 2.0  # a PodGroup made before its pod's bind is checked this long after the bind
    latest: dict[str, dict] = field(default_factory=dict)  # pod key → newest object, until it is handled
    synced: set[str] = field(default_factory=set)  # scheduler names whose first list is in
    _done: dict[str, str] = field(default_factory=dict)  # pod key → uid grouped by this process
    _names: dict[str, str] = field(default_factory=dict)  # pod key → the scheduler name it was watched under
    _queue: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    _queued: set[str] = field(default_factory=set)
    _processing: set[str] = field(default_factory=set)
    _again: set[str] = field(default_factory=set)
    _attempts: dict[str, int] = field(default_factory=dict)
    _retry_handles: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    _deferred: dict[str, asyncio.TimerHandle] = field(default_factory=dict)  # pod key → its deferral's end
    _due: set[str] = field(default_factory=set)  # pod keys whose deferral has ended
    _first_seen: dict[str, dict] = field(default_factory=dict)  # waiting bare pod → its PodGroup, as first seen
    _unstamped: set[str] = field(default_factory=set)  # bare pods whose PodGroup was made here before their bind
    _priority_classes: tuple[float, frozenset[str]] = (-1e9, frozenset())
    _events: dict[tuple[str, str], float] = field(default_factory=dict)
    _owners: dict[str, tuple[float, dict]] = field(default_factory=dict)  # owner path → (read at, object)
    _ensured: dict[str, tuple[float, str]] = field(default_factory=dict)  # podgroup path → (at, desired digest)
    _group_locks: dict[str, tuple[asyncio.Lock, int]] = field(default_factory=dict)  # path → (lock, users)

    def __post_init__(self) -> None:
        m = self.metrics
        self._outcomes = m.counter("podgrouper_pods_total", "Pods handled, by outcome.", ["outcome"])
        self._writes = m.counter("podgrouper_writes_total", "API writes, by kind.", ["kind"])

    # ---- event intake ------------------------------------------------------------------------------
    async def watch(self, scheduler_name: str, timeout_s: int = 300) -> None:
        """Follow pods with this scheduler name forever (re-listing as needed)."""
        watch = ListWatch(self.kube, k.PODS, field_selector=f"spec.schedulerName={scheduler_name}",
                          timeout_s=timeout_s)
        async for event in watch:
            if event.type == "SYNCED":
                seen = set()
                for pod in event.objects:
                    seen.add(self._offer(pod, scheduler_name))
                for key in [key for key, name in self._names.items() if name == scheduler_name and key not in seen]:
                    self.forget(key)
                self.synced.add(scheduler_name)
            elif event.type == "DELETED" and event.object is not None:
                self.forget(t.pod_key(event.object))
            elif event.object is not None:
                self._offer(event.object, scheduler_name)

    def _offer(self, pod: dict, scheduler_name: str) -> str:
        """Queue a pod unless this process already grouped it (objects are kept only until handled)."""
        key = t.pod_key(pod)
        self._names[key] = scheduler_name
        if self._done.get(key) != str(t.meta(pod).get("uid")):
            self.latest[key] = pod
            self.mark(key)
        return key

    def forget(self, key: str) -> None:
        self.latest.pop(key, None)
        self._names.pop(key, None)
        self._done.pop(key, None)
        self._attempts.pop(key, None)
        handle = self._retry_handles.pop(key, None)
        if handle is not None:
            handle.cancel()
        self._end_deferral(key)

    def _end_deferral(self, key: str) -> None:
        self._cancel_deferral(key)
        self._first_seen.pop(key, None)
        self._unstamped.discard(key)

    def _defer(self, key: str) -> None:
        """Handle the pod again when its deferral ends (or sooner, on news of it from the watch)."""
        if key not in self._deferred:
            # a pod followed since its PodGroup was made waits only for the scheduler's stamp
            delay = self.bare_annotate_delay_s
            if key in self._unstamped:
                delay = min(self.stamp_check_delay_s, delay)
            self._deferred[key] = asyncio.get_running_loop().call_later(delay, self._deferral_ended, key)

    def _cancel_deferral(self, key: str) -> None:
        handle = self._deferred.pop(key, None)
        if handle is not None:
            handle.cancel()
        self._due.discard(key)

    def _deferral_ended(self, key: str) -> None:
        self._deferred.pop(key, None)
        self._due.add(key)
        self.mark(key)

    def mark(self, key: str) -> None:
        if key in self._processing:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    async def work(self) -> None:
        await asyncio.gather(*(self._worker() for _ in range(self.workers)))

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._processing.add(key)
            try:
                await self._handle(key)
            finally:
                self._processing.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self.mark(key)

    async def _handle(self, key: str) -> None:
        pod = self.latest.get(key)
        if pod is None:
            return
        if self._done.get(key) == str(t.meta(pod).get("uid")):  # news of it came while it was being grouped
            del self.latest[key]
            return
        try:
            outcome = await self.reconcile(pod)
        except OwnerUnavailable as exc:
            outcome = "owner_unavailable"
            await self.warn(pod, str(exc))
            self._retry(key, str(exc))
        except (TransientError, ConflictError) as exc:
            outcome = "retry"
            self._retry(key, str(exc))
        except PermanentError as exc:  # e.g. a PodGroup the apiserver rejects: say so on the pod, retry slowly
            outcome = "rejected"
            await self.warn(pod, f"cannot create or update the PodGroup: {exc}")
            self._retry(key, str(exc))
        except Exception as exc:  # one odd pod must not stop the grouping of every other pod
            outcome = "failed"
            log.exception("podgrouper_pod_failed", pod=key)
            await self.warn(pod, f"podgrouper could not group this pod: {type(exc).__name__}: {exc}")
            self._retry(key, f"{type(exc).__name__}: {exc}")
        else:
            self._attempts.pop(key, None)
            handle = self._retry_handles.pop(key, None)
            if handle is not None:
                handle.cancel()
            if outcome == DEFERRED:
                self._defer(key)  # the pod stays to be handled: its watch events and the deferral's end bring it
            elif outcome == FOLLOWING:  # its next watch event brings it back: nothing kept meanwhile
                if self.latest.get(key) is pod:
                    del self.latest[key]
            else:
                self._end_deferral(key)
                self._done[key] = str(t.meta(pod).get("uid"))
                if self.latest.get(key) is pod:  # no newer object arrived meanwhile: nothing left to keep
                    del self.latest[key]
        self._outcomes.labels(outcome=outcome).inc()

    def _retry(self, key: str, why: str) -> None:
        attempt = self._attempts.get(key, 0) + 1
        self._attempts[key] = attempt
        delay = min(self.retry_max_s, self.retry_initial_s * 2 ** (attempt - 1))
        log.info("podgrouper_retry", pod=key, attempt=attempt, delay_s=delay, reason=why)
        old = self._retry_handles.pop(key, None)
        if old is not None:
            old.cancel()
        self._retry_handles[key] = asyncio.get_running_loop().call_later(delay, self.mark, key)

    # ---- one pod -----------------------------------------------------------------------------------
    async def reconcile(self, pod: dict) -> str:
        """Group one pod; returns the outcome ("grouped", "unchanged", "skipped:<why>", DEFERRED, FOLLOWING).

        A bare pod is scheduled without waiting for the podgrouper (`shoal.core.ingest.shard_model`), and the
        binder's Binding carries its pod-group-name (the apiserver copies it onto the pod in the bind's own
        write). So a pending bare pod waits for its bind: bound, its PodGroup is created carrying the start
        stamp (the scheduler stamps no PodGroup its plan did not see in the cluster) and the pod needs no patch:
        one write where a PodGroup made before the bind took three (its create, the scheduler's stamp, and the
        pod patch or a read-back of the stamp). The wait ends sooner when the pod's PodScheduled condition says
        it is not being placed now (the scheduler found no room, or a scheduling gate holds it), and at the
        latest after `bare_annotate_delay_s`: the pod then gets its PodGroup and its annotation, as in KAI, so
        the PodGroup's conditions can say why it waits. That PodGroup is followed until its pod's bind: a bind
        before the pod patch shows in the patch's answer; a later one is checked, once `stamp_check_delay_s`
        after it has given the scheduler's own stamp time to land, and stamped if the scheduler's plan did not
        know the PodGroup yet."""
        reason = t.skip_reason(pod)
        if reason is None:
            owners = await self.owner_chain(pod)
            reason = t.skip_reason(pod, owners)
        if reason == t.SKIPPED_UNNAMED:
            await self.warn(pod, t.skipped_unnamed_message(pod))
        if reason is not None:
            return f"skipped:{reason}"
        for problem in t.input_warnings(owners):
            await self.warn(pod, problem)
        grouping = rules.group_pod(pod, rules.OwnerIndex(owners), await self.priority_classes())
        desired = t.desired_podgroup(grouping, pod)
        started = t.start_stamp(pod)  # a pod bound already: its new PodGroup says when it started
        key, bare = t.pod_key(pod), rules.controller_ref(pod) is None
        waits = self.bare_annotate_delay_s > 0 and key not in self._due
        if bare and key in self._unstamped:  # its PodGroup was made while it was pending
            if started is None:
                return FOLLOWING
            if waits:
                return DEFERRED
            self._unstamped.discard(key)
            return "grouped" if await self._stamp_unless_stamped(desired, started) else "unchanged"
        if bare and started is None and waits and not t.scheduling_declined(pod):
            self._first_seen.setdefault(key, desired)
            return DEFERRED
        # a bare pod's PodGroup is the one for the pod as first seen: the labels its bind adds (runai-gpu-group)
        # are no PodGroup metadata
        desired = self._first_seen.pop(key, desired)
        written = await self.ensure_podgroup(desired, started=started)
        changed = bool(written)
        made_first = bare and written == CREATED and started is None  # before the bind its plan may not know it
        patch = t.pod_patch(pod, grouping)
        if patch is not None:
            try:
                answer = await self.kube.patch(k.PODS, t.meta(pod)["name"], patch,
                                               namespace=t.meta(pod).get("namespace"), answer=made_first)
            except NotFoundError:
                return "skipped:pod gone"
            self._writes.labels(kind="pod").inc()
            changed = True
            late = t.start_stamp(answer) if made_first and answer else None
            if late is not None:  # bound meanwhile
                await self._stamp_start(desired, late)
                made_first = False
        if changed:
            log.info("pod_grouped", pod=t.pod_key(pod), podgroup=desired["metadata"]["name"],
                     subgroup=grouping.subgroup, min_member=desired["spec"].get("minMember"),
                     queue=desired["spec"].get("queue"), priority_class=desired["spec"].get("priorityClassName"))
        if made_first:
            self._cancel_deferral(key)  # its bind starts a wait of its own
            self._unstamped.add(key)
            return FOLLOWING
        return "grouped" if changed else "unchanged"

    async def owner_chain(self, pod: dict) -> list[dict]:
        """Every owner from the pod up to the top, read from the API (uids must match the references)."""
        namespace = t.meta(pod).get("namespace") or "default"
        chain: list[dict] = []
        current: dict = pod
        for _ in range(MAX_OWNER_DEPTH):
            ref = rules.controller_ref(current)
            if ref is None:
                return chain
            resource = t.owner_resource(ref)
            what = f"{ref.get('kind')} {namespace}/{ref.get('name')}"
            if resource is None:
                raise OwnerUnavailable(f"malformed ownerReference {dict(ref)!r}")
            try:
                owner = await self._read_owner(resource, str(ref["name"]), namespace)
            except NotFoundError as exc:
                raise OwnerUnavailable(f"owner {what} ({ref.get('apiVersion')}) cannot be read yet: {exc}") from exc
            except PermanentError as exc:
                raise OwnerUnavailable(f"owner {what} ({ref.get('apiVersion')}) cannot be read: {exc}") from exc
            if ref.get("uid") and str(t.meta(owner).get("uid")) != str(ref["uid"]):
                self._owners.pop(resource.path(namespace, str(ref["name"])), None)
                raise OwnerUnavailable(f"owner {what} has uid {t.meta(owner).get('uid')}, the pod names "
                                       f"{ref['uid']}: waiting for the owner the pod belongs to")
            owner.setdefault("apiVersion", resource.api_version)
            owner.setdefault("kind", resource.kind)
            if any(t.meta(o).get("uid") == t.meta(owner).get("uid") for o in chain):
                return chain  # an ownership cycle
            chain.append(owner)
            current = owner
        return chain

    async def _read_owner(self, resource: k.Resource, name: str, namespace: str) -> dict:
        path = resource.path(namespace, name)
        now = time.monotonic()
        cached = self._owners.get(path)
        if cached and now - cached[0] < self.cache_ttl_s:
            return copy.deepcopy(cached[1])
        owner = await self.kube.get(resource, name, namespace=namespace)
        if len(self._owners) > 10_000:
            self._owners = {p: c for p, c in self._owners.items() if now - c[0] < self.cache_ttl_s}
        self._owners[path] = (now, copy.deepcopy(owner))
        return owner

    async def _stamp_start(self, desired: dict, started: str) -> None:
        """The start stamp on a PodGroup just created for a pod that was bound meanwhile."""
        meta = desired["metadata"]
        try:
            await self.kube.patch(k.PODGROUPS, meta["name"], {"metadata": {"annotations": {LAST_START: started}}},
                                  namespace=meta["namespace"], answer=False)
            self._writes.labels(kind="podgroup_patch").inc()
        except NotFoundError:
            pass  # gone with its pod

    async def _stamp_unless_stamped(self, desired: dict, started: str) -> bool:
        """The start stamp on a PodGroup that has none (read from the apiserver's watch cache); True if written."""
        meta = desired["metadata"]
        try:
            current = await self.kube.get(k.PODGROUPS, meta["name"], namespace=meta["namespace"], cached=True)
        except NotFoundError:
            return False  # gone with its pod
        if t.has_start_stamp(current):
            return False
        await self._stamp_start(desired, started)
        return True

    async def ensure_podgroup(self, desired: dict, *, started: str | None = None) -> str:
        """Create the PodGroup or patch the fields it owns: CREATED, PATCHED or "" (nothing written). A
        PodGroup created with `started` carries it as its start stamp (its pod is bound already); an existing
        one keeps its own (the scheduler writes it).

        Pods are grouped concurrently; pods of one owner share one PodGroup (its name is deterministic), so
        its writes are serialised here: the first pod writes it, the others wait and find it in the cache."""
        name, namespace = desired["metadata"]["name"], desired["metadata"]["namespace"]
        path = k.PODGROUPS.path(namespace, name)
        digest = json.dumps(desired, sort_keys=True)
        lock, users = self._group_locks.get(path, (asyncio.Lock(), 0))
        self._group_locks[path] = (lock, users + 1)
        try:
            async with lock:
                now = time.monotonic()
                seen = self._ensured.get(path)
                if seen and seen[1] == digest and now - seen[0] < self.cache_ttl_s:
                    return ""
                if len(self._ensured) > 10_000:
                    self._ensured = {p: e for p, e in self._ensured.items() if now - e[0] < self.cache_ttl_s}
                # never seen by this process (a new owner, a bare pod): most likely absent, so create first
                # and read only on 409; seen before: read first, it most likely exists
                written = await self._write_podgroup(desired, name, namespace, create_first=seen is None,
                                                     started=started)
                self._ensured[path] = (time.monotonic(), digest)
                return written
        finally:
            users = self._group_locks[path][1] - 1
            if users:
                self._group_locks[path] = (lock, users)
            else:
                del self._group_locks[path]

    async def _write_podgroup(self, desired: dict, name: str, namespace: str, *, create_first: bool = False,
                              started: str | None = None) -> str:
        made = t.with_start_stamp(desired, started)
        for _ in range(5):
            if create_first:
                create_first = False
                try:
                    await self.kube.create(k.PODGROUPS, made, namespace=namespace, answer=False)
                    self._writes.labels(kind="podgroup_create").inc()
                    return CREATED
                except ConflictError:
                    pass  # it exists (made earlier, or by another replica): read it and compare
            try:
                existing = await self.kube.get(k.PODGROUPS, name, namespace=namespace)
            except NotFoundError:
                try:
                    await self.kube.create(k.PODGROUPS, made, namespace=namespace, answer=False)
                    self._writes.labels(kind="podgroup_create").inc()
                    return CREATED
                except ConflictError:
                    continue  # created meanwhile (another worker or replica): read it and compare
            # a PodGroup made before its pod's bind by a podgrouper that restarted before it could follow the bind
            # gets the stamp here
            patch = t.podgroup_patch(existing, desired, started)
            if patch is None:
                return ""
            try:
                await self.kube.patch(k.PODGROUPS, name, patch, namespace=namespace, answer=False)
                self._writes.labels(kind="podgroup_patch").inc()
                return PATCHED
            except (ConflictError, NotFoundError):
                continue
        raise ConflictError(f"PodGroup {namespace}/{name} kept changing while being reconciled")

    async def priority_classes(self) -> frozenset[str]:
        fetched_at, names = self._priority_classes
        if time.monotonic() - fetched_at > self.priority_class_ttl_s:
            items, _ = await self.kube.list(k.PRIORITY_CLASSES)
            names = frozenset(str(t.meta(i).get("name")) for i in items)
            self._priority_classes = (time.monotonic(), names)
        return names

    async def warn(self, pod: dict, message: str) -> None:
        key = (t.pod_key(pod), message)
        now = time.monotonic()
        if now - self._events.get(key, -1e9) < self.event_dedupe_s:
            return
        self._events[key] = now
        if len(self._events) > 20_000:
            self._events = {d: ts for d, ts in self._events.items() if now - ts < self.event_dedupe_s}
        log.warning("podgrouper_warning", pod=t.pod_key(pod), message=message)
        try:
            await self.kube.create(CORE_EVENTS, t.warning_event(pod, message), namespace=t.meta(pod).get("namespace"), answer=False)
            self._writes.labels(kind="event").inc()
        except ShoalError as exc:  # an event is best effort
            log.warning("podgrouper_event_failed", pod=t.pod_key(pod), error=str(exc))

    def ready(self, names: Iterable[str]) -> bool:
        return all(name in self.synced for name in names)

    def stats(self) -> dict[str, Any]:
        return {"pods": len(self._names), "pending": len(self.latest), "queued": len(self._queued),
                "retrying": len(self._retry_handles), "deferred": len(self._deferred), "following": len(self._unstamped)}

"""The GPU ids of reservation pods, kept from one watch of the reservation namespace.

A bind into a new shared GPU waits until the node agent has written the reservation pod's GPU id
(`run.ai/reserve_for_gpu_index`). Polling the pod cost an apiserver GET every 200 ms per waiting bind and up to
200 ms of latency; here every waiter is woken by the watch event that brings the id.

    watch = ReservationWatch(kube, "kai-resource-reservation")
    asyncio.create_task(watch.run())
    change = watch.next_change()                    # first, so nothing that lands meanwhile is missed
    uuid = watch.uuids.get("gpu-reservation-…")      # None until the node agent wrote it
    await watch.changed(timeout_s=1.0, change=change)  # returns at that change (or after the timeout)
"""

from __future__ import annotations

import asyncio
import contextlib

from services.binder.kubeobjects import RESERVE_ANNOTATION
from shoal.adapters import kube as k
from shoal.adapters.kube_watch import ListWatch
from shoal.logging import get_logger

log = get_logger("services.binder")


class ReservationWatch:
    def __init__(self, kube: k.Kube, namespace: str) -> None:
        self._kube = kube
        self._namespace = namespace
        self.uuids: dict[str, str] = {}  # reservation pod name → GPU id
        self.pods: dict[str, dict] = {}  # reservation pod name → the pod as last seen (the release sync reads it)
        self.synced = False
        self._event = asyncio.Event()

    def _take(self, obj: dict, deleted: bool = False) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        uuid = (meta.get("annotations") or {}).get(RESERVE_ANNOTATION)
        if deleted:
            self.pods.pop(name, None)
        else:
            self.pods[name] = obj
        if deleted or not uuid:
            self.uuids.pop(name, None)
        else:
            self.uuids[name] = str(uuid)

    def _wake(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    def next_change(self) -> asyncio.Event:
        """The event the next change sets: take it BEFORE looking at `uuids`, then wait on it, so a change
        that lands while the waiter looks (or reads the pod) is not missed."""
        return self._event

    async def changed(self, timeout_s: float, change: asyncio.Event | None = None) -> None:
        """Return at the next change seen by the watch (or `change`, taken earlier), or after `timeout_s`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for((change or self._event).wait(), timeout_s)

    async def run(self) -> None:
        while True:
            try:
                async for event in ListWatch(self._kube, k.PODS, namespace=self._namespace):
                    if event.type == "SYNCED":
                        self.uuids, self.pods = {}, {}
                        for obj in event.objects:
                            self._take(obj)
                        self.synced = True
                    elif event.object is not None:
                        self._take(event.object, deleted=event.type == "DELETED")
                    self._wake()
            except Exception as exc:  # noqa: BLE001 - binds fall back to reading the pod; watch again
                self.synced = False
                log.warning("reservation_watch_ended", error=str(exc))
                await asyncio.sleep(2.0)

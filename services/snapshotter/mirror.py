"""An in-memory mirror of the watched kinds, kept by one list+watch per kind.

A kind whose API is not served (e.g. a CRD not installed yet) counts as synced and empty and is
watched again after a pause, so installing the CRD later is picked up without a restart. Every change is
passed on one object at a time, `on_change(obj, deleted)` (a re-list passes on only what differs from the
objects kept), so whoever listens does work in proportion to what changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from shoal.adapters.kube import Kube, Resource
from shoal.adapters.kube_watch import ListWatch
from shoal.logging import get_logger

log = get_logger("services.snapshotter")


def _key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class Mirror:
    def __init__(self, kube: Kube, resources: tuple[Resource, ...], on_change: Callable[[dict, bool], None],
                 *, retry_s: float = 5.0, watch_timeout_s: int = 300) -> None:
        self._kube = kube
        self._resources = resources
        self._on_change = on_change
        self._retry_s = retry_s
        self._watch_timeout_s = watch_timeout_s
        self.objects: dict[str, dict[str, dict]] = {r.kind: {} for r in resources}
        self._synced = {r.kind: asyncio.Event() for r in resources}
        self.relists = 0

    def all(self) -> Iterator[dict]:
        for kind in sorted(self.objects):
            yield from self.objects[kind].values()

    def get(self, kind: str, key: str) -> dict | None:
        return self.objects[kind].get(key)

    async def wait_synced(self) -> None:
        await asyncio.gather(*(e.wait() for e in self._synced.values()))

    def synced(self) -> bool:
        return all(e.is_set() for e in self._synced.values())

    async def run(self) -> None:
        await asyncio.gather(*(self._keep_watching(r) for r in self._resources))

    async def _keep_watching(self, resource: Resource) -> None:
        while True:
            watch = ListWatch(self._kube, resource, timeout_s=self._watch_timeout_s)
            try:
                async for event in watch:
                    self._apply(resource.kind, event)
            except Exception as exc:  # a permanent error (403, 404: kind not served) ends the watch
                log.warning("watch_ended", kind=resource.kind, error=str(exc))
            self.relists += watch.relists
            self._synced[resource.kind].set()
            await asyncio.sleep(self._retry_s)

    def _apply(self, kind: str, event) -> None:
        store = self.objects[kind]
        if event.type == "SYNCED":
            fresh = {}
            for obj in event.objects:
                obj.setdefault("kind", kind)
                fresh[_key(obj)] = obj
            self.objects[kind] = fresh
            for key, old in store.items():
                if key not in fresh:
                    self._on_change(old, True)
            for key, obj in fresh.items():
                if store.get(key) != obj:
                    self._on_change(obj, False)
            self._synced[kind].set()
            return
        obj = event.object or {}
        obj.setdefault("kind", kind)
        if event.type == "DELETED":
            gone = store.pop(_key(obj), {})
            if gone:
                self._on_change(gone, True)
        else:
            store[_key(obj)] = obj
            self._on_change(obj, False)

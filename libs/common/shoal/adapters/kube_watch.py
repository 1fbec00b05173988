"""List+watch of one resource as typed events, re-listing after 410 Gone.

Usage::

    watch = ListWatch(kube, PODS, namespace="team-a", label_selector="app=x")
    async for event in watch:
        if event.type == "SYNCED":        # the full current list: replace the cache with event.objects
            cache = {uid(o): o for o in event.objects}
        elif event.type == "DELETED":
            cache.pop(uid(event.object), None)
        else:                             # ADDED / MODIFIED
            cache[uid(event.object)] = event.object

The first event is SYNCED (reason "initial") unless a `resource_version` to resume from is given. The watch
asks for bookmarks, ends each request after `timeout_s` and continues from the last resourceVersion seen. When
the server answers 410 (the resourceVersion is too old) it lists again and yields SYNCED with reason
"expired" and the server's message in `detail`, then watches from the new list's resourceVersion. Connection
problems and 5xx/429 (of the list or the watch) are retried with capped backoff for as long as it takes;
403/404 and other permanent errors end the iteration with that error.
Objects are plain dicts as in YAML manifests, with apiVersion and kind.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any, Literal

import aiohttp
import msgspec

from shoal.adapters.kube import Expired, Kube, Resource, error_for_status, kube_error
from shoal.errors import TransientError
from shoal.logging import get_logger

log = get_logger(__name__)

EventType = Literal["ADDED", "MODIFIED", "DELETED", "SYNCED"]


class WatchEvent(msgspec.Struct, frozen=True):
    type: EventType
    object: dict[str, Any] | None = None  # ADDED, MODIFIED, DELETED
    objects: list[dict[str, Any]] = []  # SYNCED: every object that exists now
    resource_version: str = ""
    reason: str = ""  # SYNCED: "initial" or "expired"
    detail: str = ""  # SYNCED after 410: the server's message


class ListWatch:
    """An async iterator of `WatchEvent`s for one resource; `resource_version` is where it stands."""

    def __init__(self, kube: Kube, resource: Resource, *, namespace: str | None = None,
                 label_selector: str | None = None, field_selector: str | None = None,
                 resource_version: str | None = None, timeout_s: int = 300, page_size: int = 500,
                 max_backoff_s: float = 10.0) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resource_version = resource_version
        self.timeout_s = timeout_s
        self.page_size = page_size
        self.max_backoff_s = max_backoff_s
        self.relists = 0  # lists after a 410

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self.events()

    async def events(self) -> AsyncIterator[WatchEvent]:
        relist: str | None = "initial" if self.resource_version is None else None
        detail = ""
        failures = 0
        while True:
            try:
                if relist is not None:
                    synced = await self._list(relist, detail)
                    relist, detail = None, ""
                    yield synced
                async for event in self._watch_once():
                    failures = 0
                    yield event
            except Expired as exc:
                self.relists += 1
                relist, detail = "expired", str(exc)
                log.info("kube_watch_expired", resource=self.resource.plural, namespace=self.namespace,
                         resource_version=self.resource_version, detail=detail)
            except TransientError as exc:  # apiserver away or overloaded: keep trying, never give up
                failures += 1
                wait = random.uniform(0, min(self.max_backoff_s, 0.2 * 2 ** failures))
                log.warning("kube_watch_interrupted", resource=self.resource.plural, error=str(exc),
                            retry_in_s=round(wait, 2))
                await asyncio.sleep(wait)

    async def _list(self, reason: str, detail: str = "") -> WatchEvent:
        while True:
            try:
                items, rv = await self.kube.list(self.resource, namespace=self.namespace,
                                                 label_selector=self.label_selector,
                                                 field_selector=self.field_selector, page_size=self.page_size)
                break
            except Expired:  # a continue token expired mid-way: start the list over
                continue
        self.resource_version = rv
        return WatchEvent("SYNCED", objects=items, resource_version=rv, reason=reason, detail=detail)

    async def _watch_once(self) -> AsyncIterator[WatchEvent]:
        """One watch request, until the server ends it; raises Expired on 410."""
        query = {
            "watch": True,
            "allowWatchBookmarks": True,
            "resourceVersion": self.resource_version,
            "timeoutSeconds": self.timeout_s,
            "labelSelector": self.label_selector,
            "fieldSelector": self.field_selector,
        }
        timeout = aiohttp.ClientTimeout(total=None, connect=30, sock_connect=30, sock_read=self.timeout_s + 30)
        response = await self.kube.open("GET", self.resource.path(self.namespace), query=query, timeout=timeout)
        buffer = b""
        try:
            while True:
                try:
                    chunk = await response.content.readany()
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    raise kube_error(exc, f"watch {self.resource.plural}") from exc
                if not chunk:
                    return  # the server closed the watch (timeoutSeconds); the caller watches again
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        event = self._event(msgspec.json.decode(line))
                        if event is not None:
                            yield event
        finally:
            response.close()

    def _event(self, doc: dict[str, Any]) -> WatchEvent | None:
        kind, obj = doc.get("type"), doc.get("object") or {}
        if kind == "ERROR":
            raise error_for_status(int(obj.get("code") or 500), str(obj.get("message", "")),
                                   f"watch {self.resource.plural}")
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if rv:
            self.resource_version = rv
        if kind == "BOOKMARK" or kind not in ("ADDED", "MODIFIED", "DELETED"):
            return None
        return WatchEvent(kind, object=obj, resource_version=rv)

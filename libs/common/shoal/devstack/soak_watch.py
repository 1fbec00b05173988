"""The soak's view of its pods: a list+watch of its namespace that records every pod's nodeName transitions.

    tracker = PodTracker(kube, namespace)
    task = asyncio.create_task(tracker.run())
    tracker.nodes_by_uid       # uid → distinct nodeNames seen, in order (more than one: bound twice)
    tracker.live               # name → the pod as last seen
    tracker.gone               # names seen deleted (by the soak or by an eviction)

The watch re-lists after an apiserver restart (ListWatch); pods missing from a re-list count as gone.
"""

from __future__ import annotations

import time
from typing import Any

from shoal.adapters import kube as k
from shoal.core.fields import mapping, text


class PodTracker:
    def __init__(self, kube: k.Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.nodes_by_uid: dict[str, list[str]] = {}
        self.live: dict[str, dict[str, Any]] = {}
        self.gone: set[str] = set()
        self.bound_at: dict[str, float] = {}  # name → monotonic time first seen bound
        self.last_bound = 0.0  # monotonic time of the newest first-seen binding
        self.relists = 0
        self.events = 0

    def _seen(self, obj: dict[str, Any]) -> None:
        meta = mapping(obj, "metadata")
        name, uid = meta.get("name", ""), meta.get("uid", "")
        self.live[name] = obj
        node = (obj.get("spec") or {}).get("nodeName")
        if not node:
            return
        nodes = self.nodes_by_uid.setdefault(uid, [])
        if node not in nodes:
            nodes.append(node)
        if name not in self.bound_at:
            self.bound_at[name] = self.last_bound = time.monotonic()

    def _deleted(self, name: str) -> None:
        self.live.pop(name, None)
        self.gone.add(name)

    def apply(self, event: Any) -> None:
        self.events += 1
        if event.type == "SYNCED":
            if event.reason != "initial":
                self.relists += 1
            names = {text(o, "metadata", "name") for o in event.objects}
            for name in set(self.live) - names:
                self._deleted(name)
            for obj in event.objects:
                self._seen(obj)
        elif event.type == "DELETED":
            self._deleted(text(event.object, "metadata", "name"))
        else:
            self._seen(event.object or {})

    async def run(self) -> None:
        from shoal.adapters.kube_watch import ListWatch

        async for event in ListWatch(self.kube, k.PODS, namespace=self.namespace, timeout_s=60):
            self.apply(event)

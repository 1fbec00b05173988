"""The nodes and pods the agent serves, kept current by list+watch (re-listed after 410 Gone).

One agent serves its own node (pods by field selector `spec.nodeName=<node>`), or every fake node
(nodes by label selector, pods bound anywhere: `spec.nodeName!=`). Pods are indexed by node so a tick
reads only its node's pods. The agent's own writes are put into the cache at once (write-through), so
the next tick sees its annotations even before the watch event arrives; an older object never replaces
a newer one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from services.nodeagent.binding import RESERVE_ANNOTATION
from services.nodeagent.config import NodeAgentSettings
from services.nodeagent.translate import NodeView, PodView, node_view, pod_view
from shoal.adapters.kube import NODES, PODS, Kube, Resource
from shoal.adapters.kube_watch import ListWatch


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _node_of(obj: dict[str, Any]) -> str:
    return str((obj.get("spec") or {}).get("nodeName") or "")


class ClusterCache:
    def __init__(self, kube: Kube, settings: NodeAgentSettings) -> None:
        self.kube = kube
        if settings.all_fake_nodes:
            self.node_query: dict[str, str] = {"label_selector": settings.fake_node_selector}
            self.pod_query: dict[str, str] = {"field_selector": "spec.nodeName!="}
        else:
            self.node_query = {"field_selector": f"metadata.name={settings.node_name}"}
            self.pod_query = {"field_selector": f"spec.nodeName={settings.node_name}"}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.node_view_of: dict[str, NodeView] = {}  # node name -> its view, made when the node changes
        self.pods: dict[str, dict[str, Any]] = {}
        self.views: dict[str, PodView] = {}  # uid -> the pod as a tick reads it, translated once per version
        self.by_node: dict[str, set[str]] = {}
        self.reservation_namespace = settings.reservation_namespace
        self.waiting: set[str] = set()  # nodes with a reservation pod that has no GPU yet: serve them now
        self.wake = asyncio.Event()
        self.synced = {"nodes": asyncio.Event(), "pods": asyncio.Event()}

    @property
    def ready(self) -> bool:
        return all(e.is_set() for e in self.synced.values())

    async def wait_synced(self) -> None:
        await asyncio.gather(*(e.wait() for e in self.synced.values()))

    # ----- pods ------------------------------------------------------------------------------------------
    def put_pod(self, obj: dict[str, Any]) -> None:
        uid = _uid(obj)
        old = self.pods.get(uid)
        if old is not None and _rv(old) > _rv(obj):
            return
        if old is not None:
            self.by_node.get(_node_of(old), set()).discard(uid)
        self.pods[uid] = obj
        self.views[uid] = pod_view(obj)
        self.by_node.setdefault(_node_of(obj), set()).add(uid)
        meta = obj.get("metadata") or {}
        if meta.get("namespace") == self.reservation_namespace and _node_of(obj) \
                and RESERVE_ANNOTATION not in (meta.get("annotations") or {}):
            self.waiting.add(_node_of(obj))  # a binder waits for this pod's GPU: do not wait for the tick
            self.wake.set()

    def drop_pod(self, obj: dict[str, Any]) -> None:
        old = self.pods.pop(_uid(obj), None)
        self.views.pop(_uid(obj), None)
        if old is not None:
            self.by_node.get(_node_of(old), set()).discard(_uid(old))

    def replace_pods(self, objs: list[dict[str, Any]]) -> None:
        self.pods, self.views, self.by_node = {}, {}, {}
        for obj in objs:
            self.put_pod(obj)

    def pods_on(self, node: str) -> list[PodView]:
        views = self.views
        return [views[uid] for uid in sorted(self.by_node.get(node, ()))]

    # ----- nodes -----------------------------------------------------------------------------------------
    def put_node(self, obj: dict[str, Any]) -> None:
        old = self.nodes.get(_name(obj))
        if old is None or _rv(old) <= _rv(obj):
            self.nodes[_name(obj)] = obj
            self.node_view_of[_name(obj)] = node_view(obj)

    def drop_node(self, obj: dict[str, Any]) -> None:
        self.nodes.pop(_name(obj), None)
        self.node_view_of.pop(_name(obj), None)

    def node_views(self) -> list[NodeView]:
        """Every node as a tick reads it (translated once per version, not once per tick)."""
        views = self.node_view_of
        return [views[name] for name in sorted(self.nodes)]

    # ----- following the watches ---------------------------------------------------------------------------
    async def run(self) -> None:
        await asyncio.gather(
            self._follow(NODES, self.node_query, "nodes", self.put_node, self.drop_node, self._replace_nodes),
            self._follow(PODS, self.pod_query, "pods", self.put_pod, self.drop_pod, self.replace_pods),
        )

    def _replace_nodes(self, objs: list[dict[str, Any]]) -> None:
        self.nodes, self.node_view_of = {}, {}
        for obj in objs:
            self.put_node(obj)

    async def _follow(self, resource: Resource, query: dict[str, Any], name: str,
                      put: Callable[[dict[str, Any]], None], drop: Callable[[dict[str, Any]], Any],
                      replace: Callable[[list[dict[str, Any]]], None]) -> None:
        async for event in ListWatch(self.kube, resource, **query):
            if event.type == "SYNCED":
                replace(event.objects)
                self.synced[name].set()
            elif event.type == "DELETED" and event.object is not None:
                drop(event.object)
            elif event.object is not None:
                put(event.object)

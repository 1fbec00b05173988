"""The kube adapter against a real kube-apiserver: list+watch events, the 410 re-list path, error mapping."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from shoal.adapters.kube import CONFIGMAPS, NAMESPACES, NODES, Kube, Resource, connect_kube, kube_call
from shoal.adapters.kube_watch import ListWatch, WatchEvent
from shoal.core.fields import mapping, value_at
from shoal.errors import ConflictError, NotFoundError, PermanentError, TransientError
from shoal.retry import RetryPolicy
from shoal.settings import KubeSettings

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
                namespaced=False)
WIDGETS = Resource("test.shoal.io", "v1", "widgets", "Widget")

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.shoal.io"},
    "spec": {
        "group": "test.shoal.io",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
        }],
    },
}


def configmap(name: str, value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}}


class Events:
    """Runs a ListWatch in a task and collects its events."""

    def __init__(self, watch: ListWatch) -> None:
        self.watch = watch
        self.seen: list[WatchEvent] = []
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async for event in self.watch:
            self.seen.append(event)

    async def wait_for(self, predicate: Any, timeout: float = 30.0) -> WatchEvent:
        async with asyncio.timeout(timeout):
            while True:
                for event in self.seen:
                    if predicate(event):
                        return event
                if self.task is not None and self.task.done():
                    self.task.result()
                await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def watching(watch: ListWatch) -> AsyncIterator[Events]:
    events = Events(watch)
    events.task = asyncio.create_task(events._run())
    try:
        yield events
    finally:
        events.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await events.task


def named(kind: str, name: str, **data: str) -> Any:
    def match(event: WatchEvent) -> bool:
        obj = event.object or {}
        return (event.type == kind and value_at(obj, "metadata", "name") == name
                and all(mapping(obj, "data").get(k) == v for k, v in data.items()))
    return match


async def test_watch_sees_create_update_delete_of_a_core_kind(kube_api: client.ApiClient, namespace: str) -> None:
    kube = Kube(kube_api)
    await kube.create(CONFIGMAPS, configmap("before", "0"), namespace=namespace)
    async with watching(ListWatch(kube, CONFIGMAPS, namespace=namespace, timeout_s=5)) as events:
        synced = await events.wait_for(lambda e: e.type == "SYNCED")
        assert synced.reason == "initial"
        assert [o["metadata"]["name"] for o in synced.objects] == ["before"]
        assert synced.objects[0]["kind"] == "ConfigMap" and synced.objects[0]["apiVersion"] == "v1"

        await kube.create(CONFIGMAPS, configmap("cm", "1"), namespace=namespace)
        added = await events.wait_for(named("ADDED", "cm", v="1"))
        assert added.object is not None and added.object["kind"] == "ConfigMap"
        await kube.patch(CONFIGMAPS, "cm", {"data": {"v": "2"}}, namespace=namespace)
        await events.wait_for(named("MODIFIED", "cm", v="2"))
        await kube.delete(CONFIGMAPS, "cm", namespace=namespace)
        await events.wait_for(named("DELETED", "cm"))

        await asyncio.sleep(6)  # the 5 s watch request ends; the adapter continues from where it stood
        await kube.create(CONFIGMAPS, configmap("after", "3"), namespace=namespace)
        await events.wait_for(named("ADDED", "after"))
        assert [e.type for e in events.seen].count("SYNCED") == 1  # no re-list needed for a normal end


async def ensure_widget_crd(kube: Kube) -> None:
    """Install the test CRD once per apiserver and wait until it is served."""
    with contextlib.suppress(ConflictError):
        await kube.create(CRDS, WIDGET_CRD)
    async with asyncio.timeout(30):
        while True:
            crd = await kube.get(CRDS, "widgets.test.shoal.io")
            conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
            if conditions.get("Established") == "True":
                break
            await asyncio.sleep(0.2)


def widget(name: str, size: int) -> dict[str, Any]:
    return {"apiVersion": "test.shoal.io/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": size}}


async def test_a_too_old_resource_version_gets_410_and_the_adapter_relists(
        kube_api: client.ApiClient, namespace: str) -> None:
    # The apiserver serves watches from its watch cache, which starts at the resourceVersion of the list it made
    # when the resource began to be served. A custom resource's cache starts when its CRD is installed, long
    # after revision 1, so a watch from resourceVersion "1" is answered with 410 "too old resource version".
    kube = Kube(kube_api)
    await ensure_widget_crd(kube)
    await kube.create(WIDGETS, widget("old", 1), namespace=namespace)
    watch = ListWatch(kube, WIDGETS, namespace=namespace, resource_version="1", timeout_s=30)
    async with watching(watch) as events:
        relisted = await events.wait_for(lambda e: e.type == "SYNCED")
        assert relisted.reason == "expired"
        assert "410" in relisted.detail and "too old resource version: 1" in relisted.detail  # the server said so
        assert watch.relists == 1
        assert [o["metadata"]["name"] for o in relisted.objects] == ["old"]
        assert int(relisted.resource_version) > 1

        await kube.create(WIDGETS, widget("new", 2), namespace=namespace)
        await events.wait_for(lambda e: e.type == "ADDED" and e.object["metadata"]["name"] == "new")
        assert events.seen[0] is relisted  # re-watched from the list's resourceVersion: "old" not replayed
        assert [e.type for e in events.seen] == ["SYNCED", "ADDED"]


async def test_watch_of_a_custom_resource(kube_api: client.ApiClient, namespace: str) -> None:
    kube = Kube(kube_api)
    await ensure_widget_crd(kube)
    async with watching(ListWatch(kube, WIDGETS, namespace=namespace)) as events:
        await events.wait_for(lambda e: e.type == "SYNCED")
        await kube.create(WIDGETS, widget("w1", 3), namespace=namespace)
        added = await events.wait_for(lambda e: e.type == "ADDED")
        assert added.object is not None and added.object["spec"] == {"size": 3}
        await kube.patch(WIDGETS, "w1", {"spec": {"size": 4}}, namespace=namespace)
        modified = await events.wait_for(lambda e: e.type == "MODIFIED")
        assert modified.object is not None and modified.object["spec"]["size"] == 4
    items, rv = await kube.list(WIDGETS, namespace=namespace)
    assert [(i["kind"], i["apiVersion"], i["spec"]["size"]) for i in items] == [("Widget", "test.shoal.io/v1", 4)]
    assert rv


async def etcd_reads(kube: Kube, resource: Resource) -> float:
    """The apiserver's reads of `resource` from etcd so far (its /metrics: `etcd_request_duration_seconds_count`
    of the get operation)."""
    response = await kube.open("GET", "/metrics", content_type="text/plain")
    try:
        text = (await response.read()).decode()
    finally:
        response.release()
    labels = f'{{group="{resource.group}",operation="get",resource="{resource.plural}"}}'
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("etcd_request_duration_seconds_count" + labels))


async def test_a_cached_get_reads_the_watch_cache_not_etcd(kube_api: client.ApiClient, namespace: str) -> None:
    kube = Kube(kube_api)
    await ensure_widget_crd(kube)
    await kube.create(WIDGETS, widget("cached", 5), namespace=namespace)
    async with asyncio.timeout(30):
        while True:  # the watch cache has it a moment after the create
            with contextlib.suppress(NotFoundError):
                if (await kube.get(WIDGETS, "cached", namespace=namespace, cached=True))["spec"] == {"size": 5}:
                    break
            await asyncio.sleep(0.1)
    # the counter is the apiserver's, for every widget: the namespace controller deleting an earlier test's
    # widgets reads them too (one such read once failed an exact comparison), so 20 cached gets must add
    # fewer than 10 reads, where 20 gets through etcd add 20
    before = await etcd_reads(kube, WIDGETS)
    for _ in range(20):
        assert (await kube.get(WIDGETS, "cached", namespace=namespace, cached=True))["spec"] == {"size": 5}
    cached = await etcd_reads(kube, WIDGETS)
    assert cached - before < 10, (before, cached)
    for _ in range(20):
        await kube.get(WIDGETS, "cached", namespace=namespace)
    assert await etcd_reads(kube, WIDGETS) >= cached + 20  # a plain get is a quorum read


async def test_errors_are_mapped(kube_api: client.ApiClient, namespace: str, stack: Any) -> None:
    kube = Kube(kube_api)
    with pytest.raises(NotFoundError):
        await kube.get(CONFIGMAPS, "missing", namespace=namespace)
    await kube.create(CONFIGMAPS, configmap("dup", "1"), namespace=namespace)
    with pytest.raises(ConflictError):
        await kube.create(CONFIGMAPS, configmap("dup", "1"), namespace=namespace)
    current = await kube.get(CONFIGMAPS, "dup", namespace=namespace)
    await kube.patch(CONFIGMAPS, "dup", {"data": {"v": "2"}}, namespace=namespace)
    with pytest.raises(ConflictError):  # stale resourceVersion: re-read, then decide again
        await kube.replace(CONFIGMAPS, {**current, "data": {"v": "3"}}, namespace=namespace)
    with pytest.raises(PermanentError) as invalid:
        await kube.create(CONFIGMAPS, configmap("Not_A_Valid_Name", "1"), namespace=namespace)
    assert "422" in str(invalid.value) and not isinstance(invalid.value, NotFoundError)

    with pytest.raises(NotFoundError):  # a permanent error ends the watch instead of retrying forever
        async for _ in ListWatch(kube, Resource("nope.shoal.io", "v1", "things", "Thing"), namespace=namespace):
            pass

    nobody = await connect_kube(KubeSettings(kubeconfig=stack.kubeconfig))
    nobody.set_default_header("Impersonate-User", "shoal-test-nobody")
    try:
        with pytest.raises(PermanentError) as forbidden:
            await Kube(nobody).list(NODES)
        assert "403" in str(forbidden.value)
    finally:
        await nobody.close()

    cfg = client.Configuration(host="https://127.0.0.1:1")
    unreachable = client.ApiClient(cfg)
    try:
        with pytest.raises(TransientError):
            await kube_call(lambda: Kube(unreachable).request("GET", "/api"), what="probe",
                            policy=RetryPolicy(attempts=2, initial_s=0.01, max_backoff_s=0.01))
    finally:
        await unreachable.close()


async def test_client_from_settings(stack: Any) -> None:
    api = await connect_kube(KubeSettings(kubeconfig=stack.kubeconfig))
    try:
        names = [ns["metadata"]["name"] for ns in (await Kube(api).list(NAMESPACES))[0]]
        assert "default" in names and "kube-system" in names
    finally:
        await api.close()

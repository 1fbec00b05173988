"""Shared pieces of the acceptance-scenario tests (reference §10, seed 000) on the real stack.

Manifest builders (queues, PodGroups, pods, Jobs, ReplicaSets) in this test's node pool, a per-test queue
tree under its own parent (queues are cluster-scoped: every name carries the pool's suffix and every queue
is deleted afterwards), and readers of what a user sees: bound pods, PodGroup conditions, core/v1 events on
pods and PodGroups, and the public decision stream.

Imported by the test modules as `from scenario_helpers import …`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from e2e_helpers import decisions, eventually

from shoal.adapters.kube import JOBS, PODGROUPS, PODS, QUEUES, Kube, Resource
from shoal.errors import NotFoundError

CORE_EVENTS = Resource("", "v1", "events", "Event")
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
UNLIMITED = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
SCHEDULER = "shoal-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
POOL_LABEL = "kai.scheduler/node-pool"
LAST_START = "kai.scheduler/last-start-timestamp"
STALE_STAMP = "kai.scheduler/stale-podgroup-timestamp"


# ---- queues -------------------------------------------------------------------------------------------
class QueueTree:
    """Creates this test's queues under one parent (`root-<suffix>`, -1 everywhere, like the reference's
    `root`); `name("a")` is the real, cluster-unique name of the scenario's queue `a`. `close()` deletes
    every queue it made, children first."""

    def __init__(self, kube: Kube, pool: str) -> None:
        self.kube = kube
        self.suffix = pool.removeprefix("pool-")
        self.root = f"root-{self.suffix}"
        self.made: list[str] = []

    def name(self, short: str) -> str:
        return f"{short}-{self.suffix}"

    async def add(self, short: str, *, gpu: Mapping[str, Any] | None = None, cpu: Mapping[str, Any] | None = None,
                  memory: Mapping[str, Any] | None = None, parent: str | None = None, **spec: Any) -> str:
        """A leaf (or mid-level) queue: resources not given are {quota -1, limit -1, weight 1} (§10)."""
        if not self.made:
            await self._create(self.root, {"resources": {"gpu": UNLIMITED, "cpu": UNLIMITED, "memory": UNLIMITED}})
        name = self.name(short)
        body = {"parentQueue": self.name(parent) if parent else self.root,
                "resources": {"gpu": dict(gpu or UNLIMITED), "cpu": dict(cpu or UNLIMITED),
                              "memory": dict(memory or UNLIMITED)}, **spec}
        await self._create(name, body)
        return name

    async def _create(self, name: str, spec: dict) -> None:
        await self.kube.create(QUEUES, {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                                        "metadata": {"name": name}, "spec": spec})
        self.made.append(name)

    async def get(self, short: str) -> dict:
        return await self.kube.get(QUEUES, self.name(short))

    async def close(self) -> None:
        for name in reversed(self.made):
            with contextlib.suppress(NotFoundError):
                await self.kube.delete(QUEUES, name)


@contextlib.asynccontextmanager
async def queue_tree(kube: Kube, pool: str) -> AsyncIterator[QueueTree]:
    tree = QueueTree(kube, pool)
    try:
        yield tree
    finally:
        await tree.close()


# ---- workloads ----------------------------------------------------------------------------------------
def podgroup(namespace: str, name: str, queue: str, pool: str, *, min_member: int = 1,
             priority: str = "train", **spec: Any) -> dict:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "labels": {POOL_LABEL: pool}},
            "spec": {"minMember": min_member, "queue": queue, "priorityClassName": priority, **spec}}


def pod_spec(*, gpus: int = 1, priority: str | None = None, grace: int = 0,
             node_selector: Mapping[str, str] | None = None) -> dict:
    container: dict = {"name": "main", "image": "busybox"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict = {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": grace, "containers": [container]}
    if priority:
        spec["priorityClassName"] = priority
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return spec


def pod(namespace: str, name: str, queue: str, pool: str, *, group: str | None = None, gpus: int = 1,
        priority: str | None = None, annotations: Mapping[str, str] | None = None, grace: int = 0) -> dict:
    """A bare pod; `group` names an explicit PodGroup (pod-group-name), else the podgrouper makes one."""
    notes = dict(annotations or {})
    if group:
        notes["pod-group-name"] = group
    meta: dict = {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue, POOL_LABEL: pool}}
    if notes:
        meta["annotations"] = notes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": pod_spec(gpus=gpus, priority=priority, grace=grace)}


def job(namespace: str, name: str, queue: str, pool: str, *, parallelism: int, gpus: int = 1,
        min_member: int | None = None) -> dict:
    """A batch/v1 Job; `min_member` becomes the annotation kai.scheduler/batch-min-member."""
    annotations = {"kai.scheduler/batch-min-member": str(min_member)} if min_member is not None else {}
    template = {"metadata": {"labels": {QUEUE_LABEL: queue, POOL_LABEL: pool}},
                "spec": {**pod_spec(gpus=gpus), "restartPolicy": "Never"}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
            "spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 6,
                     "template": template}}


def replicaset(namespace: str, name: str, queue: str, pool: str, *, gpus: int = 1, priority: str = "train",
               replicas: int = 1) -> dict:
    labels = {"app": name, QUEUE_LABEL: queue, POOL_LABEL: pool}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": pod_spec(gpus=gpus, priority=priority)}}}


_RESOURCES = {"PodGroup": PODGROUPS, "Pod": PODS, "Job": JOBS, "ReplicaSet": REPLICASETS}


async def create(kube: Kube, *docs: dict) -> None:
    for doc in docs:
        await kube.create(_RESOURCES[doc["kind"]], doc, namespace=doc["metadata"]["namespace"])


async def create_spaced(kube: Kube, groups: Iterable[list[dict]], gap_s: float = 1.1) -> None:
    """Create each batch of objects, then wait `gap_s`: creationTimestamps have whole seconds, so batches
    created apart are strictly ordered (older first), as job and victim order compare them."""
    for i, docs in enumerate(groups):
        if i:
            await asyncio.sleep(gap_s)
        await create(kube, *docs)


# ---- what the user sees -------------------------------------------------------------------------------
async def pods(kube: Kube, namespace: str, prefix: str = "") -> dict[str, dict]:
    items, _ = await kube.list(PODS, namespace=namespace)
    return {p["metadata"]["name"]: p for p in items if p["metadata"]["name"].startswith(prefix)}


def node_of(pod_obj: Mapping) -> str | None:
    return (pod_obj.get("spec") or {}).get("nodeName")


def is_running(pod_obj: Mapping) -> bool:
    return (pod_obj.get("status") or {}).get("phase") == "Running" and not pod_obj["metadata"].get(
        "deletionTimestamp")


async def wait_running(kube: Kube, namespace: str, names: Iterable[str], *, timeout_s: float = 60) -> dict[str, dict]:
    """Every named pod bound and Running (the fake kubelet starts bound pods)."""
    wanted = sorted(names)

    async def check() -> dict[str, dict] | None:
        now = await pods(kube, namespace)
        ok = all(n in now and node_of(now[n]) and is_running(now[n]) for n in wanted)
        return {n: now[n] for n in wanted} if ok else None

    return await eventually(check, timeout_s=timeout_s, what=f"pods {wanted} to run")


async def wait_count_running(kube: Kube, namespace: str, prefix: str, count: int, *,
                             timeout_s: float = 60) -> dict[str, dict]:
    async def check() -> dict[str, dict] | None:
        now = await pods(kube, namespace, prefix)
        running = {n: p for n, p in now.items() if node_of(p) and is_running(p)}
        return running if len(running) >= count else None

    return await eventually(check, timeout_s=timeout_s, what=f"{count} pods {prefix}* to run")


async def pod_group_of(kube: Kube, namespace: str, pod_name: str, *, timeout_s: float = 30) -> str:
    """The PodGroup name of a pod (annotation pod-group-name, written by the podgrouper if not given)."""
    async def check() -> str | None:
        obj = await kube.get(PODS, pod_name, namespace=namespace)
        return (obj["metadata"].get("annotations") or {}).get("pod-group-name")

    return await eventually(check, timeout_s=timeout_s, what=f"pod {pod_name} to be grouped")


async def scheduling_condition(kube: Kube, namespace: str, group: str, *, timeout_s: float = 60,
                               starts_with: str = "") -> dict:
    """PodGroup.status.schedulingConditions[0], once it exists (and its message starts with `starts_with`)."""
    async def check() -> dict | None:
        obj = await kube.get(PODGROUPS, group, namespace=namespace)
        conds = (obj.get("status") or {}).get("schedulingConditions") or []
        if conds and conds[0].get("message", "").startswith(starts_with):
            return conds[0]
        return None

    return await eventually(check, timeout_s=timeout_s, what=f"a scheduling condition on PodGroup {group}")


async def conditions_now(kube: Kube, namespace: str, group: str) -> list[dict]:
    obj = await kube.get(PODGROUPS, group, namespace=namespace)
    return (obj.get("status") or {}).get("schedulingConditions") or []


async def annotations_of(kube: Kube, namespace: str, group: str) -> dict[str, str]:
    obj = await kube.get(PODGROUPS, group, namespace=namespace)
    return obj["metadata"].get("annotations") or {}


async def events(kube: Kube, namespace: str, *, kind: str | None = None, name: str | None = None,
                 reason: str | None = None) -> list[dict]:
    """core/v1 events in the namespace about `kind`/`name`, optionally with `reason`, oldest first."""
    selectors = [f"involvedObject.{k}={v}" for k, v in (("kind", kind), ("name", name)) if v]
    if reason:
        selectors.append(f"reason={reason}")
    items, _ = await kube.list(CORE_EVENTS, namespace=namespace, field_selector=",".join(selectors) or None)
    return sorted(items, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


async def wait_events(kube: Kube, namespace: str, *, kind: str, name: str | None = None, reason: str,
                      count: int = 1, timeout_s: float = 60) -> list[dict]:
    async def check() -> list[dict] | None:
        found = await events(kube, namespace, kind=kind, name=name, reason=reason)
        return found if len(found) >= count else None

    return await eventually(check, timeout_s=timeout_s, what=f"{count} {reason} event(s) on {kind} {name or '*'}")


async def decision_events(stack: Any, services: Any, kind: str, *, namespace: str) -> list[dict]:
    """Decision-stream events of one type (`evicted`, `pipelined`, …) whose subject is in `namespace`."""
    everything = await decisions(stack.kafka_bootstrap, f"{services.topic_prefix}shoal.decisions.v1")
    return [e for e in everything if e["type"] == f"io.shoal.decision.{kind}"
            and e["subject"].startswith(f"{namespace}/")]


async def wait_decisions(stack: Any, services: Any, kind: str, *, namespace: str, count: int,
                         timeout_s: float = 30) -> list[dict]:
    async def check() -> list[dict] | None:
        found = await decision_events(stack, services, kind, namespace=namespace)
        return found if len(found) >= count else None

    return await eventually(check, timeout_s=timeout_s, interval_s=1.0,
                            what=f"{count} '{kind}' decision(s) in {namespace}")


async def stays(check: Any, *, seconds: float, interval_s: float = 0.5, what: str = "condition") -> None:
    """Assert that `check()` stays truthy for `seconds` (a thing that must NOT happen during a window)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        value = await check()
        assert value, f"{what} no longer holds: {value!r}"
        await asyncio.sleep(interval_s)

"""The demo workload: what `shoal demo` submits to show gang scheduling on 2 nodes × 2 GPUs.

First a 5-pod gang (minMember 5, 1 GPU each): only 4 GPUs exist, so it stays Pending with KAI's message
"Resources were found for 4 pods while 5 are required for gang scheduling…" and no pod is bound. Then a
3-pod gang (minMember 3): it is bound whole, in one decision.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.adapters import kube as k

NAMESPACE = "shoal-demo"
QUEUE = "demo"
POOL = "demo"
SCHEDULER = "shoal-scheduler"


@dataclass(frozen=True)
class Names:
    """Where the demo lives. On a shared stack every name gets a suffix so runs never meet each other."""

    namespace: str = NAMESPACE
    queue: str = QUEUE
    pool: str = POOL

    @classmethod
    def unique(cls, suffix: str) -> Names:
        return cls(namespace=f"{NAMESPACE}-{suffix}", queue=f"{QUEUE}-{suffix}", pool=f"{POOL}-{suffix}")

    @property
    def nodes(self) -> list[str]:
        return [f"{self.pool}-n1", f"{self.pool}-n2"]


def gang(name: str, size: int, names: Names = Names(), *, run_seconds: int | None = None) -> list[dict]:
    namespace, queue, pool = names.namespace, names.queue, names.pool
    pg = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
          "metadata": {"name": name, "namespace": namespace, "labels": {"kai.scheduler/node-pool": pool}},
          "spec": {"minMember": size, "queue": queue, "priorityClassName": "train"}}
    annotations = {"pod-group-name": name}
    if run_seconds:
        annotations["shoal.io/run-seconds"] = str(run_seconds)
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{name}-{i}", "namespace": namespace, "annotations": annotations,
                          "labels": {"kai.scheduler/queue": queue, "kai.scheduler/node-pool": pool}},
             "spec": {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 0,
                      "containers": [{"name": "train", "image": "busybox",
                                      "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
            for i in range(size)]
    return [pg, *pods]


def queue(name: str = QUEUE) -> dict:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}}


async def submit(kube: k.Kube, docs: list[dict]) -> None:
    """Create each object (an existing one is left as it is)."""
    from shoal.errors import ConflictError

    kinds = {"PodGroup": k.PODGROUPS, "Pod": k.PODS, "Queue": k.QUEUES, "Namespace": k.NAMESPACES}
    for doc in docs:
        try:
            await kube.create(kinds[doc["kind"]], doc, namespace=doc["metadata"].get("namespace"))
        except ConflictError:
            pass


def namespace_doc(name: str = NAMESPACE) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


async def remove(kube: k.Kube, names: Names) -> None:
    """Delete what the demo created on a shared stack: its namespace, queue and nodes."""
    from shoal.errors import NotFoundError

    for resource, name in [(k.NAMESPACES, names.namespace), (k.QUEUES, names.queue),
                           *((k.NODES, n) for n in names.nodes)]:
        try:
            await kube.delete(resource, name)
        except NotFoundError:
            pass

"""Evictions: through the Eviction API (PodDisruptionBudgets respected; a 429 releases the victim's lease so the
next cycle searches again) or, with eviction_mode=delete, by deleting the pod (KAI's behaviour); then KAI's
Evict event on the victim's PodGroup, naming the evictor."""

from __future__ import annotations

from prometheus_client import Counter

from services.binder import kubeobjects as ko
from services.binder.writes import Writes
from shoal.adapters import kube as k
from shoal.adapters.inflight import InFlight
from shoal.core.fields import text
from shoal.core.plan import Evict
from shoal.errors import NotFoundError, TransientError
from shoal.logging import get_logger
from shoal.messages.plan import PlanIssued

log = get_logger("services.binder")


class Evictions(Writes):
    """Mixed into `Binder`, whose fields these are (with the writes it makes)."""

    kube: k.Kube
    inflight: InFlight
    eviction_mode: str
    _evictions: Counter

    async def evict(self, plan: PlanIssued, op: Evict) -> None:
        namespace, name = ko.split(op.pod)
        # read the victim's PodGroup before the eviction: a per-pod group (bare pod, ReplicaSet) is owned by
        # its pod and garbage-collected with it, and the Evict event must still find its object
        group = await self._get(k.PODGROUPS, op.pod_group) if op.pod_group else None
        try:
            if self.eviction_mode == "delete":
                await self.kube.delete(k.PODS, name, namespace=namespace)
            else:
                await self.kube.create(k.PODS, ko.eviction(op.pod), namespace=namespace, name=name,
                                       subresource="eviction", idempotent=True, answer=False)
        except NotFoundError:
            self._evictions.labels(op.action, "gone").inc()
            return
        except TransientError as exc:
            # 429 from the Eviction API: a PodDisruptionBudget blocks it; the victim no longer counts as
            # releasing, and the next cycle searches again
            self._evictions.labels(op.action, "blocked").inc()
            log.warning("eviction_blocked", pod=op.pod, action=op.action, error=str(exc))
            await self.inflight.remove(plan.shard, [op.pod_uid])
            return
        self._evictions.labels(op.action, "evicted").inc()
        by_ns, by_name = ko.split(op.by)
        if op.pod_group:
            await self.event("PodGroup", op.pod_group, "Evict", op.message, "Normal", annotations={
                "num-evicted-pods": "1", "evictor-action-type": op.action,
                "evictor-pod-group-name": by_name, "evictor-pod-group-namespace": by_ns},
                uid=text(group, "metadata", "uid") if group else None)

"""Shared GPUs: one reservation pod per shared GPU (created once, whatever the replays), the wait for the GPU id
the node agent gives it, what the pod's GPU sharing mode passes the GPU by (ConfigMaps or annotations), and the
release of reservation pods no pod uses any more."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from prometheus_client import Counter

from services.binder import fractions
from services.binder import kubeobjects as ko
from services.binder.binding_metadata import BindingMetadata, Route
from services.binder.fractions import FractionRefused
from services.binder.reservation_watch import ReservationWatch
from services.binder.reservations import stale_reservations
from shoal.adapters import kube as k
from shoal.adapters.inflight import InFlight
from shoal.core.fields import mapping
from shoal.core.kai_labels import GPU_GROUP_LABEL
from shoal.core.plan import Bind
from shoal.core.plan_effects import bound_pod_metadata
from shoal.core.sharing_mode import DEFAULT_MODE, DISABLED, disabled_message
from shoal.errors import ConflictError, NotFoundError
from shoal.logging import get_logger

log = get_logger("services.binder")


class SharedGpus(BindingMetadata):
    """Mixed into `Binder`, whose fields these are (with the writes it makes)."""

    kube: k.Kube
    inflight: InFlight
    reservation_namespace: str
    reservation_timeout_s: float
    reservation_image: str
    reservation_grace_s: float
    reservations: ReservationWatch | None
    _made: set[str]
    _creating: dict[str, asyncio.Future]
    _reservations: Counter

    async def prepare_fraction(self, op: Bind, mode: str = DEFAULT_MODE) -> tuple[Route, dict]:
        """Reservation pod per group (created once), then what the GPU sharing mode passes the GPU by (the GPU
        ConfigMaps, or NvFractions' annotations: `fractions`). Returns how the pod's labels and annotations go
        (`binding_metadata`) and them: patched here already on the "patch" route; to be put on the binding on
        the others (the "probe" route: the caller settles the probe once the binding is answered)."""
        if mode == DISABLED:
            raise FractionRefused(disabled_message(op.pod))
        # the pod is read while the node agent assigns the reservations' GPUs, from the apiserver's watch cache
        # (what it is read for, its containers and the annotations its owner gave it, were set at creation, which
        # the planner saw); the ConfigMaps and the pod's patch are independent writes, all done before the binding
        *uuids, pod = await asyncio.gather(*(self.ensure_reservation(op.node, group, wait=True,
                                                                     compute_mode=op.compute_mode)
                                             for group in op.gpu_groups), self._get(k.PODS, op.pod, cached=True))
        if pod is None:
            raise NotFoundError(f"pod {op.pod} is gone")
        namespace, name = ko.split(op.pod)
        metadata = bound_pod_metadata(op)
        metadata["labels"][ko.SHARED_LABEL] = "true"  # the reservation pods' GC finds the pods that use them by it
        metadata["annotations"].update(fractions.pod_annotations(pod, op, uuids, mode))
        configmaps = ko.fraction_configmaps(pod, uuids, op.fraction or "", fractions.capabilities_extra(op, mode)) \
            if fractions.uses_configmaps(mode) else None
        route = await self.metadata_route()  # after everything that may refuse the fraction
        writes = [self._apply_configmap(configmaps[0]), self._ensure_configmap(configmaps[1])] if configmaps else []
        if route == "patch":
            writes.append(self.kube.patch(k.PODS, name, {"metadata": metadata}, namespace=namespace, answer=False))
        try:
            await asyncio.gather(*writes)
        except BaseException:
            if route == "probe":
                await self.settle_probe(op, metadata, bound=False)
            raise
        return route, metadata

    async def ensure_reservation(self, node: str, group: str, *, wait: bool = False,
                                 compute_mode: str | None = None) -> str:
        name = ko.reservation_name(node, group)
        ns = self.reservation_namespace
        if not self._reservation_exists(name):  # a plan's Reserve made it: its binds post no second create
            await self._create_reservation(node, group, compute_mode)
        if not wait:
            return ""
        deadline = time.monotonic() + self.reservation_timeout_s
        watch = self.reservations
        # the pod itself is read when no synced watch serves it, and after each second without news
        read_at = time.monotonic() + 1.0 if watch is not None and watch.synced else 0.0
        while True:
            change = watch.next_change() if watch is not None else None  # before looking: none is missed
            uuid = watch.uuids.get(name) if watch is not None else None
            if uuid is None and (watch is None or not watch.synced or time.monotonic() >= read_at):
                pod = await self._get(k.PODS, f"{ns}/{name}")
                if pod is None:  # gone since it was made (or taken to exist): made again
                    await self._create_reservation(node, group, compute_mode)
                uuid = mapping(pod, "metadata", "annotations").get(ko.RESERVE_ANNOTATION)
                read_at = time.monotonic() + 1.0
            if uuid:
                return uuid
            if time.monotonic() >= deadline:
                await self._delete_quietly(f"{ns}/{name}")
                raise TimeoutError("Reached timeout while waiting for GPU reservation pod to be allocated "
                                   f"({ns}/{name} on node {node})")
            if watch is not None and watch.synced:
                await watch.changed(timeout_s=1.0, change=change)
            else:
                await asyncio.sleep(0.2)

    def _reservation_exists(self, name: str) -> bool:
        """The reservation pod exists as far as this binder knows: the synced watch has it, or this process
        made it and the watch has not shown it yet (nor its deletion)."""
        watch = self.reservations
        if watch is not None and watch.synced and name in watch.pods:
            self._made.discard(name)
            return True
        return name in self._made

    async def _create_reservation(self, node: str, group: str, compute_mode: str | None) -> None:
        """Create the GPU's reservation pod; a create of it already under way here is awaited, not repeated
        (a plan's Reserve and its fractions' binds run side by side)."""
        name = ko.reservation_name(node, group)
        pending = self._creating.get(name)
        if pending is None:
            pending = self._creating[name] = asyncio.ensure_future(self._post_reservation(node, group, compute_mode))
            pending.add_done_callback(lambda _: self._creating.pop(name, None))
        await asyncio.shield(pending)

    async def _post_reservation(self, node: str, group: str, compute_mode: str | None) -> None:
        name = ko.reservation_name(node, group)
        ns = self.reservation_namespace
        try:
            await self.kube.create(k.PODS, ko.reservation_pod(
                node, group, ns, image=self.reservation_image,
                annotations=fractions.reservation_annotations(compute_mode)), namespace=ns, answer=False)
            self._reservations.inc()
            log.info("reservation_pod_created", node=node, gpu_group=group, pod=f"{ns}/{name}")
        except ConflictError:
            pass  # it exists: one reservation pod per shared GPU, whatever the replays
        self._made.add(name)

    async def sync_reservations(self) -> int:
        """Delete the reservation pods of shared GPUs no pod uses any more; returns how many. The reservation pods
        come from the reservation watch once it is synced (listed otherwise)."""
        watch = self.reservations
        if watch is not None and watch.synced:  # the reservation namespace's watch has them all already
            reservations = [pod for pod in watch.pods.values()
                            if ((pod.get("metadata") or {}).get("labels") or {}).get("app") == ko.RESERVATION_APP]
        else:
            reservations, _ = await self.kube.list(k.PODS, namespace=self.reservation_namespace,
                                                   label_selector=f"app={ko.RESERVATION_APP}")
        now = datetime.now(UTC)
        if not stale_reservations(reservations, (), set(), now, self.reservation_grace_s, check_groups=False):
            return 0  # none old enough to release: the cluster-wide list of shared pods is not needed
        shared, _ = await self.kube.list(k.PODS, label_selector=f"{ko.SHARED_LABEL}=true")
        stale = stale_reservations(reservations, shared, await self.inflight.groups_in_flight(),
                                   now, self.reservation_grace_s)
        for pod in stale:
            await self._delete_quietly(f"{self.reservation_namespace}/{pod['metadata']['name']}")
            log.info("reservation_pod_released", pod=pod["metadata"]["name"],
                     gpu_group=pod["metadata"]["labels"].get(GPU_GROUP_LABEL))
        return len(stale)

    async def _ensure_configmap(self, cm: dict) -> None:
        """Create it unless it exists (its data may be the node agent's)."""
        try:
            await self.kube.create(k.CONFIGMAPS, cm, namespace=cm["metadata"]["namespace"], answer=False)
        except ConflictError:
            pass

    async def _apply_configmap(self, cm: dict) -> None:
        meta = cm["metadata"]
        try:
            await self.kube.create(k.CONFIGMAPS, cm, namespace=meta["namespace"], answer=False)
        except ConflictError:
            await self.kube.patch(k.CONFIGMAPS, meta["name"], {"data": cm["data"]}, namespace=meta["namespace"], answer=False)

    async def _delete_quietly(self, key: str) -> None:
        namespace, name = ko.split(key)
        if namespace == self.reservation_namespace:
            self._made.discard(name)
        await self._quietly(self.kube.delete(k.PODS, name, namespace=namespace, body={"gracePeriodSeconds": 0}))

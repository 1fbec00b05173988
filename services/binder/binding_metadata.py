"""Where a fraction's labels and annotations (its shared GPUs' group labels, the received resource type,
NvFractions' device annotations) reach the pod: on its Binding, or by a patch of the pod before the binding.

The apiserver copies a Binding's annotations onto the pod in the write that binds it, and its labels too since
v1.35 (feature gate PodTopologyLabelsAdmission, on by default). So with `SHOAL_FRACTION_METADATA=binding` (the
default) a fraction costs no pod patch of its own, the costliest of its writes, and its labels can never be
seen on an unbound pod. Whether this apiserver copies the labels is checked on the binder's first fraction bind
(the probe): the pod is read back, and where they are missing they are patched onto it and every later
fraction gets KAI's patch before its binding. Fractions bound while the probe is under way wait for its answer.
`patch` keeps KAI's write throughout (admission webhooks on pod updates then see the labels).
"""

from __future__ import annotations

import asyncio
from typing import Literal

from services.binder import kubeobjects as ko
from services.binder.writes import Writes
from shoal.adapters import kube as k
from shoal.core.fields import mapping
from shoal.core.plan import Bind
from shoal.errors import ConflictError, PermanentError, TransientError
from shoal.logging import get_logger

log = get_logger("services.binder")

Route = Literal["binding", "patch", "probe"]


class BindingMetadata(Writes):
    """Mixed into `Binder`, whose fields these are."""

    fraction_metadata: str  # "binding" | "patch" (SHOAL_FRACTION_METADATA)
    _labels_copied: asyncio.Future | None  # the probe's answer; None: nobody has asked yet, or it was inconclusive

    async def metadata_route(self) -> Route:
        """How this fraction's metadata goes: on its binding, by a patch before it, or on its binding as the
        probe (the caller then calls `settle_probe` whatever happens to the bind)."""
        if self.fraction_metadata == "patch":
            return "patch"
        known = self._labels_copied
        if known is None:
            self._labels_copied = asyncio.get_running_loop().create_future()
            return "probe"
        return "binding" if await asyncio.shield(known) else "patch"

    async def settle_probe(self, op: Bind, metadata: dict, bound: bool) -> None:
        """After the probe's binding: read the pod back; labels the apiserver left out are patched on, and the
        answer goes to the fractions waiting for it. A bind that failed, or a pod that could not be read, answers
        nothing: the waiting fractions take the patch and the next fraction probes again."""
        answer = self._labels_copied
        copied: bool | None = None
        try:
            if bound:
                copied = await self._labels_arrived(op, metadata)
        finally:
            self._labels_copied = None if copied is None else answer
            if answer is not None and not answer.done():
                answer.set_result(bool(copied))
        if copied is False:
            log.warning("binding_labels_not_copied", pod=op.pod,
                        detail="this apiserver does not copy a Binding's labels onto the pod (before v1.35, or "
                               "feature gate PodTopologyLabelsAdmission off): fractions' labels and annotations "
                               "are patched before their binding from now on")
        elif copied:
            log.info("binding_labels_copied", pod=op.pod)

    async def _labels_arrived(self, op: Bind, metadata: dict) -> bool | None:
        """True when the bound pod has the labels (read from etcd, not the watch cache); False when it has not (they
        are patched on now); None when the pod could not be read (they are patched on all the same)."""
        namespace, name = ko.split(op.pod)
        try:
            pod = await self._get(k.PODS, op.pod)  # None: gone
        except (PermanentError, TransientError, TimeoutError) as exc:
            log.info("binding_labels_unread", pod=op.pod, error=str(exc))
            pod = None
        if pod is not None and mapping(pod, "metadata", "labels").items() >= metadata["labels"].items():
            return True
        try:
            await self.kube.patch(k.PODS, name, {"metadata": metadata}, namespace=namespace, answer=False)
        except (PermanentError, TransientError, TimeoutError, ConflictError) as exc:
            log.warning("fraction_metadata_patch_failed", pod=op.pod, error=str(exc))
        return None if pod is None else False

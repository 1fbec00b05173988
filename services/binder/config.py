"""The binder's settings (`SHOAL_*` environment variables; `shoal-binder --help` lists them).

Apart from `app.py` so that `--help` imports no client library (the Kubernetes client binds a socket at
import).
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from shoal.settings import GpuSharingServiceSettings, PositiveInt, doc


class BinderSettings(GpuSharingServiceSettings, frozen=True, kw_only=True):
    reservation_image: Annotated[str, doc("image of the GPU reservation pods (KAI: --resource-reservation-pod-image)")] = (
        "registry.k8s.io/pause:3.10")
    reservation_timeout_s: Annotated[float, doc("how long a reservation pod may take to get its GPU")] = 40.0
    eviction_mode: Annotated[Literal["evict", "delete"], doc("evict: the Eviction API (PDBs hold); delete: as KAI")] = (
        "evict")
    fraction_metadata: Annotated[Literal["binding", "patch"], doc(
        "how a fraction's labels and annotations reach the pod: binding: on its Binding, which the apiserver "
        "copies (labels since v1.35; checked on the first fraction, patched where missing); patch: a pod patch "
        "before the binding, as KAI (webhooks on pod updates see it)")] = "binding"
    group_id: Annotated[str, doc("Kafka consumer group (after the topic prefix)")] = "shoal-binder"
    reservation_sync_s: Annotated[float, doc("how often idle reservation pods are looked for")] = 10.0
    reservation_grace_s: Annotated[float, doc("a reservation pod younger than this is never released")] = 30.0
    queue_status_interval_s: Annotated[float, Meta(ge=0), doc("a Queue's status is written at most this often; "
                                                               "figures that change meanwhile wait")] = 1.0
    parallel: Annotated[int, doc("API calls in flight per plan phase (binds, evictions, status writes)")] = 64
    # binds of the next plan while the rest of the last one is under way
    pipeline: Annotated[PositiveInt, doc("plans per shard under way at once")] = 32

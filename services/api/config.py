"""The api service's settings (`SHOAL_*` environment variables; `shoal-api --help` lists them).

Apart from `app.py` so that `--help` imports no client library (the Kubernetes client binds a socket at
import).
"""

from __future__ import annotations

from typing import Annotated, Literal

from shoal.core.model import DEFAULT_RESERVATION_NAMESPACE
from shoal.settings import PositiveFloat, PositiveInt, ServiceSettings, doc


class ApiSettings(ServiceSettings, frozen=True, kw_only=True):
    backlog: Annotated[PositiveInt, doc("decisions per partition read back at start to fill the index")] = 5000
    index_subjects: Annotated[PositiveInt, doc("subjects (pods, pod groups) the index keeps")] = 50_000
    index_per_subject: Annotated[PositiveInt, doc("decisions kept per subject")] = 20
    recent: Annotated[PositiveInt, doc("decisions kept for the dashboard")] = 200
    heartbeat_s: Annotated[PositiveFloat, doc("SSE keepalive comment interval")] = 15.0
    sse_queue: Annotated[PositiveInt, doc("events buffered per SSE client before its oldest are dropped")] = 1000
    history_size: Annotated[PositiveInt, doc("samples the dashboard's over-time chart keeps (ring buffer)")] = 360
    history_interval_s: Annotated[PositiveFloat, doc("seconds between two samples of the chart")] = 10.0
    history_queues: Annotated[PositiveInt, doc("queues per sample; the rest added up as (other)")] = 50
    evictions: Annotated[PositiveInt, doc("evicted decisions kept for the dashboard")] = 500
    reservation_namespace: Annotated[str, doc("namespace of GPU reservation pods (as the binder's)")] = (
        DEFAULT_RESERVATION_NAMESPACE)
    api_auth: Annotated[Literal["kubernetes", "none"],
                        doc("kubernetes: callers' bearer tokens checked by TokenReview and SubjectAccessReview; "
                            "none: anyone reads everything (local dev only)")] = "kubernetes"
    auth_cache_ttl_s: Annotated[PositiveFloat, doc("seconds a TokenReview or SubjectAccessReview answer is reused")] = (
        15.0)
    auth_cache_size: Annotated[PositiveInt, doc("answers of each kind the cache keeps")] = 10_000

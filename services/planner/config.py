"""The planner's settings (`SHOAL_*` environment variables; `shoal-planner --help` lists them).

Apart from `app.py` so that `--help` imports no client library (the Kubernetes client binds a socket at
import).
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from shoal.adapters.planning import PlanningSettings
from shoal.settings import doc


class PlannerSettings(PlanningSettings, frozen=True, kw_only=True):
    shards: Annotated[tuple[str, ...], doc("shards planned here (empty: every shard of the partitions given)")] = ()
    inflight_ttl_s: Annotated[float, doc("how long a planned bind holds its resources for the binder")] = 60.0
    fairshare_stale_revisions: Annotated[int, doc("warn when fair-share figures lag more revisions than this")] = 5
    fairshare_stale_s: Annotated[float, Meta(ge=0), doc(
        "…and are older than this many seconds (the fairshare service publishes a shard at most once per its "
        "SHOAL_MIN_INTERVAL_S, while a busy shard has many revisions a second); one warning per shard this often")] = 10.0
    idle_cycle_s: Annotated[float, Meta(ge=0), doc(
        "when a shard's last plan was empty and every pending pod's bind is in flight (a backlog's binds landing), "
        "a new revision is planned at most this often (0: every revision); a pod that arrives is planned at once")] = 1.0
    bind_cap: Annotated[int, Meta(ge=0), doc(
        "a cycle places no further job once it has placed this many pods (a gang is placed whole) and then ends "
        "before the eviction actions; the next cycle follows at once on the binds in flight, so no plan outgrows "
        "SHOAL_KAFKA_MAX_MESSAGE_BYTES (0: no cap)")] = 20_000
    group_id: Annotated[str, doc("Kafka consumer group (after the topic prefix)")] = "shoal-planner"
    verdict_reassert_s: Annotated[Annotated[float, Meta(ge=0)], doc(
        "a pending PodGroup's unchanged verdict is published on the decision stream again after this many "
        "seconds (0: only when it changes)")] = 600.0

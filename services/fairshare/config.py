"""The fairshare service's settings (`SHOAL_*` environment variables; `shoal-fairshare --help` lists them).

Apart from `app.py` so that `--help` imports no client library (the Kubernetes client binds a socket at
import).
"""

from __future__ import annotations

from typing import Annotated

from shoal.adapters.planning import PlanningSettings
from shoal.settings import doc


class FairShareSettings(PlanningSettings, frozen=True, kw_only=True):
    """The planner's inputs (PlanningSettings: SchedulerConfig, sharing modes, reservation namespace, usage) and
    the service's own."""

    group_id: Annotated[str, doc("Kafka consumer group (after the topic prefix)")] = "shoal-fairshare"
    min_interval_s: Annotated[float, doc("a shard's figures are published at most this often")] = 1.0

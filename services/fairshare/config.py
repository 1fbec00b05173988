"""The fairshare service's settings (`SHOAL_*` environment variables; `shoal-fairshare --help` lists them).

Apart from `app.py` so that `--help` imports no client library (the Kubernetes client binds a socket at
import).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from shoal.adapters.planning import PlanningSettings
from shoal.settings import KafkaSettings, PositiveInt, doc


class FairShareSettings(PlanningSettings, frozen=True, kw_only=True):
    """The planner's inputs (PlanningSettings: SchedulerConfig, sharing modes, reservation namespace, usage) and
    the service's own."""

    group_id: Annotated[str, doc("Kafka consumer group (after the topic prefix)")] = "shoal-fairshare"
    min_interval_s: Annotated[float, doc("a shard's figures are published at most this often")] = 1.0
    # the planner's and binder's consumers keep SHOAL_KAFKA_FETCH_MAX_WAIT_MS short for latency; this consumer's
    # figures go out at most every min_interval_s, so an idle fetch may wait longer (an idle 50 ms fetch costs
    # the broker and this process ~20 requests a second for nothing)
    fetch_wait_ms: Annotated[PositiveInt, doc("how long the broker holds this consumer's fetch that finds no "
                                                  "new announcement (SHOAL_KAFKA_FETCH_MAX_WAIT_MS is the "
                                                  "other consumers')")] = 500

    def consumer_kafka(self) -> KafkaSettings:
        """The Kafka settings of the announcement consumer: the service's own fetch wait."""
        return msgspec.structs.replace(self.kafka, fetch_max_wait_ms=self.fetch_wait_ms,
                                       idle_fetch_wait_ms=max(self.fetch_wait_ms, self.kafka.idle_fetch_wait_ms))

"""The fairshare service's settings (`SHOAL_*` environment variables; `shoal-fairshare --help` lists them).

Apart from `app.py` so that `--help` imports no client library (the Kubernetes client binds a socket at
import).
"""

from __future__ import annotations

from typing import Annotated

from shoal.adapters.usage_history import UsageSettings
from shoal.settings import ServiceSettings, doc


class FairShareSettings(ServiceSettings, frozen=True, kw_only=True):
    group_id: Annotated[str, doc("Kafka consumer group (after the topic prefix)")] = "shoal-fairshare"
    min_interval_s: Annotated[float, doc("a shard's figures are published at most this often")] = 1.0
    usage: UsageSettings = UsageSettings()

"""What the planner and the fairshare service hand the core for a shard's snapshot, built one way.

Both divide fair share from the same inputs: the SchedulerConfig document (SHOAL_SCHEDULER_CONFIG: kValue, the
actions, ...), the shard pool's gpuSharingMode, the reservation namespace and the usage history, all from one
settings section (`PlanningSettings`, which both services' settings extend) through one `ShardInputs`. So the
figures the fairshare service publishes are the ones the planner's cycle divides
(tests/unit/services/test_planning_inputs.py).

    inputs = shard_inputs(settings, usage_source(redis, settings.usage))
    usage = await inputs.usage_at(shard, latest.taken_at)
    result = assemble(latest.model, now=latest.taken_at, config_doc=inputs.config_doc, given=inputs.given(shard, usage))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated

import yaml

from shoal.adapters.usage_history import UsageSettings, UsageSource
from shoal.core.ingest.config import Given
from shoal.core.sharing_mode import DEFAULT_MODE
from shoal.core.usage import epoch_seconds, queue_usage
from shoal.settings import GpuSharingServiceSettings, doc


class PlanningSettings(GpuSharingServiceSettings, frozen=True, kw_only=True):
    """What the planner and the fairshare service both read to divide fair share."""

    scheduler_config: Annotated[str | None, doc("path of a SchedulerConfig YAML document")] = None
    usage: UsageSettings = UsageSettings()  # time-based fair share source (SHOAL_USAGE_*)


def load_config_doc(path: str | None) -> dict | None:
    """The SchedulerConfig document (apiVersion shoal.io/v1alpha1) for the service's shards, if given."""
    if not path:
        return None
    with open(path, encoding="utf-8") as handle:
        loaded = yaml.safe_load(handle)
    return loaded if isinstance(loaded, dict) else None


def _default_mode(shard: str) -> str:
    return DEFAULT_MODE


@dataclass(frozen=True)
class ShardInputs:
    config_doc: Mapping | None = None
    sharing_mode_of: Callable[[str], str] = _default_mode  # SHOAL_[POOL_]GPU_SHARING_MODE(S), by shard (pool)
    reservation_namespace: str | None = None  # SHOAL_RESERVATION_NAMESPACE (None: the document's or default)
    usage: UsageSource | None = None  # the allocation history (None: no time-based fair share)

    async def usage_at(self, shard: str, taken_at: str) -> dict[str, dict[str, float]]:
        """Each queue's normalised usage at the snapshot's time, by resource ({} without a source)."""
        return await self.usage.usage(shard, now_s=epoch_seconds(taken_at)) if self.usage is not None else {}

    def given(self, shard: str, usage: Mapping[str, Mapping[str, float]]) -> Given:
        return Given(usage=queue_usage(usage), sharing_mode=self.sharing_mode_of(shard),
                     reservation_namespace=self.reservation_namespace)


def shard_inputs(settings: PlanningSettings, usage: UsageSource | None) -> ShardInputs:
    return ShardInputs(config_doc=load_config_doc(settings.scheduler_config), sharing_mode_of=settings.mode_for,
                       reservation_namespace=settings.reservation_namespace, usage=usage)

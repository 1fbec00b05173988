"""The planner: a snapshot and its fair share in, a plan out.

Plans each shard it owns and publishes the plan on Kafka: binds, pipelines, evictions, reservations and
PodGroup status, each with its reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.planner.config import PlannerSettings
from shoal.adapters.dependencies import KAFKA, REDIS
from shoal.adapters.startup import Service

SERVICE = Service("planner", PlannerSettings, "services.planner.app:build", needs=(KAFKA, REDIS), about=__doc__)


def main(argv: Sequence[str] | None = None) -> None:
    SERVICE.main(argv)


if __name__ == "__main__":
    main()

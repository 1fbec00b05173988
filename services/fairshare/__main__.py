"""The fairshare service: each queue's share of its shard.

On every snapshot, divides the shard's resources among its queues (deserved, fair share and allocated per
resource) and publishes the figures on Kafka and in Redis.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.fairshare.config import FairShareSettings
from shoal.adapters.dependencies import KAFKA, REDIS
from shoal.adapters.startup import Service

SERVICE = Service("fairshare", FairShareSettings, "services.fairshare.app:build", needs=(KAFKA, REDIS),
                  about=__doc__)


def main(argv: Sequence[str] | None = None) -> None:
    SERVICE.main(argv)


if __name__ == "__main__":
    main()

"""The api service: Shoal's decisions, readable.

Serves the decision stream over HTTP (SSE), the answers behind `shoal explain` and `shoal queues`, the
dashboard and Prometheus metrics.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.api.config import ApiSettings
from shoal.adapters.dependencies import KAFKA, KUBE, REDIS
from shoal.adapters.startup import Service

SERVICE = Service("api", ApiSettings, "services.api.app:build", needs=(KAFKA, REDIS, KUBE), about=__doc__)


def main(argv: Sequence[str] | None = None) -> None:
    SERVICE.main(argv)


if __name__ == "__main__":
    main()

"""The binder: plans carried out on the Kubernetes API.

Creates reservation pods, fraction ConfigMaps and env, bindings, evictions, PodGroup status and events for
each plan, and publishes the results on Kafka.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.binder.config import BinderSettings
from shoal.adapters.dependencies import KAFKA, KUBE, REDIS
from shoal.adapters.startup import Service

SERVICE = Service("binder", BinderSettings, "services.binder.app:build", needs=(KAFKA, REDIS, KUBE), about=__doc__)


def main(argv: Sequence[str] | None = None) -> None:
    SERVICE.main(argv)


if __name__ == "__main__":
    main()

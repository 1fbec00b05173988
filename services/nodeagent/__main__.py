"""The node agent: GPUs on each node, shared and policed.

Runs on each GPU node (DaemonSet, or one process for every fake node): puts GPU UUIDs on reservation pods,
polices memory and compute shares (NVML or a fake GPU inventory) and publishes GPU usage on Kafka when Kafka
is reachable.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.nodeagent.config import NodeAgentSettings
from shoal.adapters.dependencies import KUBE
from shoal.adapters.startup import Service

SERVICE = Service("nodeagent", NodeAgentSettings, "services.nodeagent.app:build", needs=(KUBE,), about=__doc__)


def main(argv: Sequence[str] | None = None) -> None:
    SERVICE.main(argv)


if __name__ == "__main__":
    main()

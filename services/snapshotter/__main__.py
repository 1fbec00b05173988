"""The snapshotter: the cluster as one versioned snapshot per shard.

Watches nodes, pods, queues, PodGroups, PriorityClasses, Topologies and PDBs, keeps a snapshot of each shard
(node pool) in Redis and announces every revision on Kafka (SnapshotPublished).
"""

from __future__ import annotations

from collections.abc import Sequence

from services.snapshotter.config import SnapshotterSettings
from shoal.adapters.dependencies import KAFKA, KUBE, REDIS
from shoal.adapters.startup import Service

SERVICE = Service("snapshotter", SnapshotterSettings, "services.snapshotter.app:build", needs=(KAFKA, REDIS, KUBE),
                  about=__doc__)


def main(argv: Sequence[str] | None = None) -> None:
    SERVICE.main(argv)


if __name__ == "__main__":
    main()

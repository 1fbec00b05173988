"""The podgrouper: a PodGroup for every pod Shoal schedules.

Groups each pod with Shoal's schedulerName by its owner (Job, JobSet, LWS, Deployment, StatefulSet,
PyTorchJob/MPIJob/..., RayCluster/RayJob, or the bare pod), with KAI's naming and defaults.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.podgrouper.config import PodGrouperSettings
from shoal.adapters.dependencies import KUBE
from shoal.adapters.startup import Service

SERVICE = Service("podgrouper", PodGrouperSettings, "services.podgrouper.app:build", needs=(KUBE,), about=__doc__)


def main(argv: Sequence[str] | None = None) -> None:
    SERVICE.main(argv)


if __name__ == "__main__":
    main()

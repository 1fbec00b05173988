"""The admission service: the pod and queue webhooks.

Serves the admission webhooks over HTTPS: validation and mutation of pods (fraction annotations,
runtimeClass) and queues (sanity of parents and quotas).
"""

from __future__ import annotations

from collections.abc import Sequence

from services.admission.config import AdmissionSettings
from shoal.adapters.dependencies import KUBE
from shoal.adapters.startup import Service

SERVICE = Service("admission", AdmissionSettings, "services.admission.app:build", needs=(KUBE,), about=__doc__)


def main(argv: Sequence[str] | None = None) -> None:
    SERVICE.main(argv)


if __name__ == "__main__":
    main()

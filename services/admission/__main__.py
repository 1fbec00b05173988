"""`shoal-admission`: settings → logging → run."""

from __future__ import annotations

import asyncio

from services.admission.app import AdmissionSettings, build
from shoal.adapters.http import run_service
from shoal.logging import configure_logging
from shoal.settings import settings_or_exit


def main() -> None:
    settings = settings_or_exit(AdmissionSettings)
    configure_logging("admission", settings.log_level)
    asyncio.run(run_service(build(settings), settings.http))


if __name__ == "__main__":
    main()

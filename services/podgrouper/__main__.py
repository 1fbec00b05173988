"""`shoal-podgrouper`: settings → logging → run."""

from __future__ import annotations

import asyncio

from services.podgrouper.app import PodGrouperSettings, build
from shoal.adapters.http import run_service
from shoal.logging import configure_logging
from shoal.settings import settings_or_exit


def main() -> None:
    settings = settings_or_exit(PodGrouperSettings)
    configure_logging("podgrouper", settings.log_level)
    asyncio.run(run_service(build(settings), settings.http))


if __name__ == "__main__":
    main()

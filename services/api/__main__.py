"""`shoal-api`: settings → logging → run."""

from __future__ import annotations

import asyncio

from services.api.app import ApiSettings, build
from shoal.adapters.http import run_service
from shoal.logging import configure_logging
from shoal.settings import settings_or_exit


def main() -> None:
    settings = settings_or_exit(ApiSettings)
    configure_logging("api", settings.log_level)
    asyncio.run(run_service(build(settings), settings.http))


if __name__ == "__main__":
    main()

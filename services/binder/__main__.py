"""`shoal-binder`: settings → logging → run."""

from __future__ import annotations

import asyncio

from services.binder.app import BinderSettings, build
from shoal.adapters.http import run_service
from shoal.logging import configure_logging
from shoal.settings import settings_or_exit


def main() -> None:
    settings = settings_or_exit(BinderSettings)
    configure_logging("binder", settings.log_level)
    asyncio.run(run_service(build(settings), settings.http))


if __name__ == "__main__":
    main()

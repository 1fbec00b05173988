"""`python -m services.nodeagent` / `shoal-nodeagent`: settings → logging → run."""

from __future__ import annotations

import asyncio

from services.nodeagent.app import build
from services.nodeagent.config import NodeAgentSettings
from shoal.adapters.http import run_service
from shoal.logging import configure_logging, get_logger
from shoal.settings import redacted, settings_or_exit

log = get_logger("services.nodeagent")


def main() -> None:
    settings = settings_or_exit(NodeAgentSettings)
    configure_logging("nodeagent", settings.log_level)
    log.info("nodeagent_starting", settings=redacted(settings))
    asyncio.run(run_service(build(settings), settings.http))


if __name__ == "__main__":
    main()

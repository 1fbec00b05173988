"""What every service's console script does: `--help`, settings, logging, its dependencies reached, then
`run_service` until SIGTERM/SIGINT.

    # services/planner/__main__.py
    SERVICE = Service("planner", PlannerSettings, "services.planner.app:build", needs=(KAFKA, REDIS), about=__doc__)

    def main(argv: Sequence[str] | None = None) -> None:
        SERVICE.main(argv)

`--help` (`-h`) prints what the service does and every `SHOAL_*` variable it reads, with type, default and
description, straight from the settings declarations (`shoal.settings.settings_help`), and opens nothing: the
settings live apart from the wiring (`services/<name>/config.py`), and the wiring, with the client libraries it
imports (the Kubernetes client binds a socket at import), is imported only to start. The exit statuses are
`EXIT_STATUSES`.
"""

from __future__ import annotations

import asyncio
import gc
import pkgutil
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from aiohttp import web

from shoal.adapters.dependencies import Dependency, NotReached, reach
from shoal.adapters.http import run_service
from shoal.errors import ConfigError
from shoal.logging import configure_logging, get_logger
from shoal.settings import ServiceSettings, exit_invalid, redacted, settings_help, settings_or_exit

log = get_logger(__name__)

S = TypeVar("S", bound=ServiceSettings)

EXIT_USAGE = 2  # also `settings_or_exit`'s
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130
EXIT_STATUSES = (
    (0, "stopped by SIGTERM or SIGINT (or --help)"),
    (1, "crashed: the error is logged"),
    (EXIT_USAGE, "an unknown argument, or invalid settings (each one listed)"),
    (EXIT_UNREACHABLE, "a dependency not reached within SHOAL_START_TIMEOUT_S, or no Kubernetes configuration"),
    (EXIT_INTERRUPTED, "interrupted (SIGINT) while starting"),
)


@dataclass(frozen=True, slots=True)
class Service(Generic[S]):
    """A service as its console script runs it: `needs` are reached, then the app `build(settings)` makes is
    served; `build` is where that function is ("module:function"), imported only then."""

    name: str
    settings: type[S]
    build: str
    needs: Sequence[Dependency] = ()
    about: str | None = None

    @property
    def prog(self) -> str:
        return f"shoal-{self.name}"

    def help(self) -> str:
        needs = ", ".join(d.name for d in self.needs) or "nothing"
        statuses = "\n".join(f"  {code:<3}  {text}" for code, text in EXIT_STATUSES)
        return "\n".join([
            f"usage: {self.prog} [-h | --help]",
            "",
            textwrap.dedent(self.about or "").strip(),
            "",
            f"Reaches at start: {needs} (within SHOAL_START_TIMEOUT_S).",
            "",
            "Settings, from environment variables (unset or empty: the default; lists are comma-separated):",
            settings_help(self.settings),
            "",
            "Exit status:",
            statuses,
        ])

    def main(self, argv: Sequence[str] | None = None) -> None:
        args = list(sys.argv[1:] if argv is None else argv)
        if "-h" in args or "--help" in args:
            print(self.help())
            return
        if args:
            print(f"{self.prog}: unknown argument {args[0]!r} (it takes only --help; settings are SHOAL_* "
                  "environment variables)", file=sys.stderr)
            raise SystemExit(EXIT_USAGE)
        settings = settings_or_exit(self.settings)
        configure_logging(self.name, settings.log_level)
        try:
            with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
                runner.run(self._run(settings))
        except NotReached as exc:
            print(f"{self.prog}: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_UNREACHABLE) from None
        except ConfigError as exc:
            exit_invalid(exc.problems)
        except KeyboardInterrupt:
            raise SystemExit(EXIT_INTERRUPTED) from None

    async def _run(self, settings: S) -> None:
        started = time.monotonic()
        await reach(settings, self.needs)  # logs nothing: a failure is the one line on stderr
        log.info("service_starting", service=self.name, reached=[d.name for d in self.needs],
                 waited_s=round(time.monotonic() - started, 3), settings=redacted(settings))
        build: Callable[[S], web.Application] = pkgutil.resolve_name(self.build)
        app = build(settings)
        quiet_collector()
        await run_service(app, settings.http)


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop a service runs on (`SHOAL_EVENT_LOOP`): uvloop's (libuv, its transports in C) by default;
    None: the standard library's. py-spy at 50 pods/s had a fifth of the binder's samples in the standard loop's
    epoll and socket writes; with uvloop the six services used about 5 % less CPU for the same pods
    (docs/benchmarks-e2e.md, "2026-12-07 (night)")."""
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None


# Objects allocated per young collection. CPython's 700 suits scripts; a service's steady work (a watch event
# or a message decoded, a plan applied) allocates thousands of short-lived objects at a time, which the default
# collects in several passes, each promoting survivors that a later full collection must scan again.
YOUNG_THRESHOLD = 10_000


def quiet_collector() -> None:
    """Fewer cyclic-GC passes over what lives as long as the process: the imported modules, classes and clients
    made so far are frozen (kept out of every later collection; reference counting still frees them), and young
    collections run every YOUNG_THRESHOLD allocations instead of 700. Measured at 50 pods/s, the services spent
    8-13 % of their CPU in the collector (gc.callbacks)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)

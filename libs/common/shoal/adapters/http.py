"""Every service's HTTP face: `/healthz`, `/readyz`, `/metrics`, plus the lifecycle of its background work.

Usage (in `services/<name>/app.py`)::

    def build(settings: PlannerSettings) -> web.Application:
        metrics, readiness = Metrics(), Readiness()
        app = build_app(metrics=metrics, readiness=readiness)

        async def kafka_ctx(app: web.Application) -> AsyncIterator[None]:   # aiohttp cleanup context
            async with Publisher(settings.kafka) as bus:
                readiness.add("kafka", bus.ready)
                app[BUS] = bus
                yield

        app.cleanup_ctx.append(kafka_ctx)
        app.cleanup_ctx.append(background("plan_loop", lambda app: plan_loop(app[BUS])))
        return app

    # __main__.py
    asyncio.run(run_service(build(settings), settings.http))

`cleanup_ctx` entries are set up in order before the server accepts requests and torn down in reverse order.
A background task that ends with an error stops the service: `run_service` re-raises it (exit status != 0), so
the pod restarts instead of limping on.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from shoal.logging import get_logger
from shoal.metrics import CONTENT_TYPE, Metrics
from shoal.settings import HttpSettings

log = get_logger(__name__)

Check = Callable[[], bool | Awaitable[bool]]


class Readiness:
    """Named readiness checks (sync or async callables returning bool), evaluated on each `/readyz`."""

    def __init__(self, timeout_s: float = 2.0) -> None:
        self._checks: dict[str, Check] = {}
        self._timeout_s = timeout_s

    def add(self, name: str, check: Check) -> None:
        self._checks[name] = check

    def remove(self, name: str) -> None:
        self._checks.pop(name, None)

    async def _one(self, name: str, check: Check) -> bool:
        try:
            async with asyncio.timeout(self._timeout_s):
                result = check()
                if inspect.isawaitable(result):
                    result = await result
                return bool(result)
        except Exception as exc:  # a failing check means "not ready", never a 500
            log.warning("readiness_check_failed", check=name, error=f"{type(exc).__name__}: {exc}")
            return False

    async def evaluate(self) -> dict[str, bool]:
        names = list(self._checks)
        results = await asyncio.gather(*(self._one(n, self._checks[n]) for n in names))
        return dict(zip(names, results, strict=True))


METRICS = web.AppKey("shoal_metrics", Metrics)
READINESS = web.AppKey("shoal_readiness", Readiness)
FAILURE = web.AppKey("shoal_failure", asyncio.Future)


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    checks = await request.app[READINESS].evaluate()
    ready = all(checks.values())
    return web.json_response({"ready": ready, "checks": checks}, status=200 if ready else 503)


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE})


def build_app(*, metrics: Metrics | None = None, readiness: Readiness | None = None) -> web.Application:
    """An aiohttp app serving the three endpoints; add service routes and `cleanup_ctx` entries to it."""
    app = web.Application()
    app[METRICS] = metrics or Metrics()
    app[READINESS] = readiness or Readiness()
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


def _failure(app: web.Application) -> asyncio.Future[None]:
    if FAILURE not in app:
        app[FAILURE] = asyncio.get_running_loop().create_future()
    return app[FAILURE]


def background(name: str, work: Callable[[web.Application], Awaitable[None]],
               ) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context running `work(app)` as a task while the app runs; cancelled at shutdown. If the
    task fails (or returns early), the service stops with that error."""

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        failure = _failure(app)

        async def guarded() -> None:
            try:
                await work(app)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                log.exception("background_task_crashed", task=name)
                if not failure.done():
                    failure.set_exception(exc)
                raise
            else:
                if not failure.done():
                    failure.set_exception(RuntimeError(f"background task {name} returned"))

        task = asyncio.create_task(guarded(), name=name)
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    return ctx


@contextlib.asynccontextmanager
async def serve(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[int]:
    """Run `app` (its cleanup contexts set up first) on host:port; yields the bound port (port 0 picks one)."""
    _failure(app)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        log.info("http_serving", host=host, port=bound)
        yield bound
    finally:
        await runner.cleanup()


async def run_service(app: web.Application, http: HttpSettings, *, stop: asyncio.Event | None = None) -> None:
    """Serve until SIGTERM/SIGINT (or `stop` is set); re-raise the error of a crashed background task."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        async with serve(app, http.host, http.port):
            failure = _failure(app)
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait((stopping, failure), return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            log.info("service_stopping", reason="failure" if failure.done() else "signal")
        if failure.done():
            failure.result()  # raises the background task's error
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)

"""What a service must reach before it serves: Kafka, Redis, the Kubernetes API, each within
SHOAL_START_TIMEOUT_S, or one line saying which, where it was looked for and what to set.

    await reach(settings, (KAFKA, REDIS, KUBE))    # NotReached(line) when one is not there in time

Kafka must answer a bootstrap, Redis a PING, the Kubernetes API `GET /version` (any answer but 401). What does not
answer yet is tried again (`shoal.retry`) until the timeout, quietly: the one line reports the last error. A
missing Kubernetes configuration and permanent errors (rejected credentials, TLS) end the wait at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from shoal.adapters.kafka import kafka_reachable
from shoal.adapters.redis_client import connect_redis, ping
from shoal.errors import ConfigError, PermanentError, ShoalError, TransientError
from shoal.retry import RetryPolicy, retry_transient
from shoal.settings import ServiceSettings

QUIET_WHILE_WAITING = ("aiokafka", "kafka", "shoal.retry")  # loggers of each failed try


class NotReached(ShoalError):
    """A dependency did not answer in time or cannot be used; the message is the line to print."""


@dataclass(frozen=True, slots=True)
class Dependency:
    name: str
    hint: str  # what to do about it, naming the settings
    address: Callable[[ServiceSettings], str]
    probe: Callable[[ServiceSettings], Awaitable[None]]  # returns once it answers; TransientError: not yet


def _redis_address(settings: ServiceSettings) -> str:
    parts = urlsplit(settings.redis.url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()  # no password in the line


async def _redis(settings: ServiceSettings) -> None:
    redis = connect_redis(settings.redis)
    try:
        await ping(redis)
    finally:
        await redis.aclose()


def _kube_address(settings: ServiceSettings) -> str:
    from shoal.adapters.kube import config_source, kubeconfig_path  # see _kube

    try:
        return config_source(settings.kube, kubeconfig_path(settings.kube))
    except ConfigError:
        return f"kubeconfig {settings.kube.kubeconfig}"


async def _kube(settings: ServiceSettings) -> None:
    # imported when used: the Kubernetes client binds a socket at import, and `--help` opens none
    from shoal.adapters.kube import Kube, connect_kube

    api = await connect_kube(settings.kube)
    try:
        await Kube(api, request_timeout_s=settings.kube.request_timeout_s).request("GET", "/version")
    except PermanentError as exc:
        if exc.status == 401:  # any other answer means it is there
            raise
    finally:
        await api.close()


KAFKA = Dependency("Kafka", "start it, or set SHOAL_KAFKA_BOOTSTRAP (SHOAL_KAFKA_* for TLS and SASL)",
                   lambda settings: settings.kafka.bootstrap, lambda settings: kafka_reachable(settings.kafka))
REDIS = Dependency("Redis", "start it, or set SHOAL_REDIS_URL (SHOAL_REDIS_* for TLS and ACL users)",
                   _redis_address, _redis)
KUBE = Dependency("Kubernetes API", "set SHOAL_KUBECONFIG to the kubeconfig file of a running cluster, or run in "
                  "a pod", _kube_address, _kube)


@contextlib.contextmanager
def _quiet(names: Sequence[str]) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


async def _wait(dependency: Dependency, settings: ServiceSettings, timeout_s: float) -> str:
    """"" once `dependency` answered, else why not, in a few words."""
    last: list[TransientError] = []

    async def attempt() -> None:
        try:
            await dependency.probe(settings)
        except TransientError as exc:
            last[:] = [exc]
            raise

    policy = RetryPolicy(attempts=sys.maxsize, max_elapsed_s=timeout_s, initial_s=0.2, max_backoff_s=2.0)
    where = f"{dependency.name} at {dependency.address(settings)}"
    try:
        async with asyncio.timeout(timeout_s):
            await retry_transient(attempt, policy=policy, what=f"reach {dependency.name}")
    except ConfigError as exc:
        return f"no {dependency.name} configuration ({'; '.join(exc.problems)}); {dependency.hint}"
    except (TimeoutError, TransientError):
        why = f" ({last[-1]})" if last else ""
        return f"{where} not reached within {timeout_s:g} s{why}; {dependency.hint}"
    except Exception as exc:  # permanent: credentials, TLS, a broken setting; the line, never a traceback
        return f"{where} cannot be used ({type(exc).__name__}: {exc}); {dependency.hint}"
    return ""


async def reach(settings: ServiceSettings, needs: Sequence[Dependency], *, timeout_s: float | None = None) -> None:
    """Return once every dependency in `needs` answered; raise `NotReached` naming each that did not within
    `timeout_s` (default: `settings.start_timeout_s`)."""
    timeout_s = settings.start_timeout_s if timeout_s is None else timeout_s
    with _quiet(QUIET_WHILE_WAITING):
        failures = await asyncio.gather(*(_wait(d, settings, timeout_s) for d in needs))
    if any(failures):
        raise NotReached("; and ".join(f for f in failures if f))

"""The one retry helper: idempotent operations only, transient errors only, bounded, with jittered backoff.

Usage::

    from shoal.retry import RetryPolicy, retry_transient

    pod = await retry_transient(lambda: read_pod(name), what="read_pod")
    await retry_transient(lambda: store.publish(shard, rev, snap), policy=RetryPolicy(attempts=3))

Only `TransientError` (and its subclasses) is retried; any other exception propagates at once. When the
attempts or the time budget run out, the last `TransientError` is raised unchanged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from shoal.errors import TransientError

T = TypeVar("T")

_log = logging.getLogger("shoal.retry")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard to try: at most `attempts` calls and `max_elapsed_s` seconds in all; waits grow
    exponentially from `initial_s`, capped at `max_backoff_s`, each drawn uniformly ("full jitter")."""

    attempts: int = 5
    max_elapsed_s: float = 30.0
    initial_s: float = 0.1
    max_backoff_s: float = 5.0


DEFAULT_POLICY = RetryPolicy()


def _log_retry(what: str) -> Callable[[RetryCallState], None]:
    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        _log.warning(
            "retrying_transient_error",
            extra={"fields": {"what": what, "attempt": state.attempt_number, "wait_s": round(wait, 3),
                              "error": str(exc), "error_type": type(exc).__name__}},
        )

    return before_sleep


async def retry_transient(
    operation: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy = DEFAULT_POLICY,
    what: str = "operation",
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Call `operation()` until it returns, retrying only `TransientError` within `policy`'s bounds.

    Every Kubernetes, Redis and Kafka-handler call goes through here and nearly all succeed at once, so the
    first attempt is a plain call: tenacity's set-up (about 40 % of a local kube call's client CPU) is paid
    only once that attempt failed; it then counts it as its first and goes on from there."""
    try:
        return await operation()
    except TransientError as exc:
        first: TransientError | None = exc
    retrying = AsyncRetrying(
        retry=retry_if_exception_type(TransientError),
        stop=stop_after_attempt(policy.attempts) | stop_after_delay(policy.max_elapsed_s),
        wait=wait_random_exponential(multiplier=policy.initial_s, max=policy.max_backoff_s),
        before_sleep=_log_retry(what),
        reraise=True,
        sleep=sleep,
    )

    async def attempt() -> T:
        nonlocal first
        if first is not None:  # the failed first attempt, replayed to tenacity without calling again
            failed, first = first, None
            raise failed
        return await operation()

    return await retrying(attempt)

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
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

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

    def wait_s(self, attempt: int) -> float:
        """The wait after failed attempt `attempt` (1 = the first): uniform in [0, initial_s * 2^(attempt-1)],
        the window capped at `max_backoff_s`."""
        window = self.max_backoff_s if attempt > 64 else min(self.max_backoff_s, self.initial_s * 2 ** (attempt - 1))
        return random.uniform(0, max(0.0, window))


DEFAULT_POLICY = RetryPolicy()


async def retry_transient(
    operation: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy = DEFAULT_POLICY,
    what: str = "operation",
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Call `operation()` until it returns, retrying only `TransientError` within `policy`'s bounds.

    A plain loop rather than a retry library: every Kubernetes, Redis and Kafka-handler call goes through
    here, and the first attempt (nearly always the only one) costs one call and one try block."""
    started = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return await operation()
        except TransientError as exc:
            if attempt >= policy.attempts or time.monotonic() - started >= policy.max_elapsed_s:
                raise
            wait = policy.wait_s(attempt)
            _log.warning(
                "retrying_transient_error",
                extra={"fields": {"what": what, "attempt": attempt, "wait_s": round(wait, 3),
                                  "error": str(exc), "error_type": type(exc).__name__}},
            )
        await sleep(wait)

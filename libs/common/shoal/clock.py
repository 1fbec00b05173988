"""Time for the I/O layer: services read the clock here and hand `now` to the pure core as data.

Usage::

    clock: Clock = SystemClock()
    snapshot_now = clock.now()          # timezone-aware UTC datetime
    started = clock.monotonic()         # seconds, for durations

Tests pass a `ManualClock` and move it with `advance()`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The real wall clock (UTC) and monotonic clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that only moves when told to; for tests of time-dependent service logic."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = 0.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._mono += seconds


def utc_now() -> datetime:
    """Shorthand for `SystemClock().now()`."""
    return datetime.now(UTC)

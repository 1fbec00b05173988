"""Times and durations as KAI writes them in messages and annotations: Go's time.Duration text, RFC 3339."""

from __future__ import annotations

from datetime import UTC, datetime


def go_duration(seconds: int | float) -> str:
    """Go's time.Duration String() for whole seconds: 30s, 2m0s, 1h0m0s."""
    total = int(seconds)
    sign = "-" if total < 0 else ""
    total = abs(total)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(int(epoch), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

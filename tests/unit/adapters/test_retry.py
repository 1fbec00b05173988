"""The retry helper retries transient errors only, within its bounds, with growing jittered waits."""

from __future__ import annotations

import pytest

from shoal.errors import ConflictError, PermanentError, TransientError
from shoal.retry import RetryPolicy, retry_transient


class Flaky:
    """Fails with the given errors in order, then returns "ok"."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


async def test_transient_errors_are_retried_until_success() -> None:
    op, sleeps = Flaky(TransientError("a"), TransientError("b")), Sleeps()
    assert await retry_transient(op, sleep=sleeps) == "ok"
    assert op.calls == 3
    assert len(sleeps.waits) == 2


@pytest.mark.parametrize("error", [PermanentError("no"), ConflictError("409"), ValueError("bug")])
async def test_other_errors_propagate_on_first_attempt(error: Exception) -> None:
    op, sleeps = Flaky(error), Sleeps()
    with pytest.raises(type(error)):
        await retry_transient(op, sleep=sleeps)
    assert op.calls == 1
    assert sleeps.waits == []


async def test_attempts_are_bounded_and_the_last_error_is_raised() -> None:
    op, sleeps = Flaky(*[TransientError(f"e{i}") for i in range(10)]), Sleeps()
    with pytest.raises(TransientError, match="e3"):
        await retry_transient(op, policy=RetryPolicy(attempts=4), sleep=sleeps)
    assert op.calls == 4
    assert len(sleeps.waits) == 3


async def test_waits_are_jittered_and_capped() -> None:
    policy = RetryPolicy(attempts=8, initial_s=1.0, max_backoff_s=3.0, max_elapsed_s=1000)
    op, sleeps = Flaky(*[TransientError("x") for _ in range(7)]), Sleeps()
    assert await retry_transient(op, policy=policy, sleep=sleeps) == "ok"
    assert len(sleeps.waits) == 7
    assert all(0 <= w <= 3.0 for w in sleeps.waits)
    assert len(set(sleeps.waits)) > 1  # drawn, not fixed


async def test_elapsed_time_bound_stops_retrying() -> None:
    op = Flaky(*[TransientError("slow") for _ in range(100)])
    with pytest.raises(TransientError):
        await retry_transient(op, policy=RetryPolicy(attempts=100, max_elapsed_s=0.2, initial_s=0.05,
                                                     max_backoff_s=0.05))
    assert 2 <= op.calls < 100

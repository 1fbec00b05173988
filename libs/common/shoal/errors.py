"""Shoal's error hierarchy: library errors are mapped to these at the edge (adapters), never deeper.

    ShoalError
    ├── TransientError     retrying the same idempotent call may succeed (429, 5xx, connection lost, timeout)
    ├── PermanentError     retrying cannot help (400/403/404/422, undecodable input)
    │   └── NotFoundError  the object does not exist (404); often "already done" for deletes
    ├── ConflictError      the object changed under us (409): re-read it, then decide again
    ├── ConfigError        settings are invalid; `problems` lists every one of them
    └── InvariantBroken    Shoal's own logic is wrong: crash the process rather than limp on

Usage::

    try:
        await kube_call(lambda: api.patch_namespaced_pod(name, ns, body))
    except ConflictError:
        pod = await kube_call(lambda: api.read_namespaced_pod(name, ns))  # re-read, then retry
"""

from __future__ import annotations

from collections.abc import Sequence


class ShoalError(Exception):
    """Base of every error Shoal raises on purpose; `status` is the HTTP status behind it, if any
    (e.g. 429 from the Eviction API means a PodDisruptionBudget blocks the eviction)."""

    def __init__(self, *args: object, status: int | None = None) -> None:
        super().__init__(*args)
        self.status = status


class TransientError(ShoalError):
    """A retry of the same idempotent operation may succeed."""


class PermanentError(ShoalError):
    """Retrying the same operation cannot succeed."""


class NotFoundError(PermanentError):
    """The addressed object does not exist."""


class ConflictError(ShoalError):
    """The object was changed concurrently (HTTP 409, lost compare-and-set): re-read, then decide again."""


class ConfigError(ShoalError):
    """Invalid configuration; every problem found is in `problems`, one line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("invalid settings: " + "; ".join(self.problems))


class InvariantBroken(ShoalError):
    """A rule Shoal guarantees was violated by Shoal itself; never caught except to crash loudly."""

"""Helpers for the end-to-end tests (imported by test modules as `e2e_helpers`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


async def eventually(check: Callable[[], Awaitable[Any]], *, timeout_s: float = 60.0, interval_s: float = 0.3,
                     what: str = "condition") -> Any:
    """Poll `check` until it returns a truthy value; fail with `what` after the timeout."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; last value: {last!r}")


async def decisions(bootstrap: str, topic: str, *, timeout_s: float = 5.0) -> list[dict]:
    """Every event on the decision topic so far (read from the beginning)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    out: list[dict] = []
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            if not batch and out:
                break
            for records in batch.values():
                for r in records:
                    try:
                        event = json.loads(r.value)
                    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                        continue  # not a decision (test_kafka_hostile_consumers writes such): a subscriber skips it
                    if isinstance(event, dict):
                        out.append(event)
    finally:
        await consumer.stop()
    return out


def api_service(services: Any, stack: Any, **env: str) -> Iterator[str]:
    """A `shoal-api` process on the session services' topics (`env` added to its environment), stopped after;
    yields its URL, e.g. `http://127.0.0.1:8123`."""
    import dataclasses

    from shoal.devstack.procs import free_port, launch, stop_process, wait_ready
    from shoal.devstack.scheduler import service_spec

    port = free_port()
    full = {**stack.env(), "SHOAL_TOPIC_PREFIX": services.topic_prefix, "SHOAL_LOG_LEVEL": "INFO",
            "SHOAL_HEARTBEAT_S": "1", **env}
    spec = dataclasses.replace(service_spec("api", full, port=port), name=f"shoal-api-{uuid.uuid4().hex[:6]}")
    pid = launch(services.state_dir, spec, tie_to_parent=True)
    try:
        wait_ready(services.state_dir, spec, pid)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(services.state_dir, spec.name)


@contextlib.contextmanager
def service_process(state: Path, spec: Any) -> Iterator[int]:
    """Launch `spec` (a ProcessSpec, tied to the test process), wait until it is ready and stop it afterwards;
    yields its pid. A service that does not start fails the test with the reason."""
    from shoal.devstack.errors import DevStackError
    from shoal.devstack.procs import launch, stop_process, wait_ready

    pid = launch(state, spec, tie_to_parent=True)
    try:
        wait_ready(state, spec, pid)
    except DevStackError as exc:
        stop_process(state, spec.name)
        pytest.fail(f"{spec.name} failed to start: {exc}", pytrace=False)
    try:
        yield pid
    finally:
        stop_process(state, spec.name)

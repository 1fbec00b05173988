"""Logs are one JSON object per line with ts, level, event, logger, service and the fields as keys."""

from __future__ import annotations

import io
import json
import logging

import pytest

from shoal.logging import configure_logging, get_logger


@pytest.fixture
def lines():
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    configure_logging("planner", "DEBUG", stream=stream)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def test_event_with_fields_is_one_json_line(lines) -> None:
    get_logger("services.planner.app").info("plan_published", shard="pool-a", revision=42, binds=["a/b"])
    [doc] = lines()
    assert doc["event"] == "plan_published"
    assert doc["level"] == "info"
    assert doc["logger"] == "services.planner.app"
    assert doc["service"] == "planner"
    assert doc["shard"] == "pool-a" and doc["revision"] == 42 and doc["binds"] == ["a/b"]
    assert doc["ts"].endswith("Z") and "T" in doc["ts"]


def test_exceptions_and_plain_library_messages(lines) -> None:
    log = get_logger("shoal.test")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("handler_failed", offset=3)
    logging.getLogger("aiokafka.consumer").warning("Heartbeat failed for group %s", "g1")
    logging.getLogger("x").debug("cache_synced", extra={"items": 5})
    failed, library, plain = lines()
    assert failed["level"] == "error" and failed["exc_type"] == "ValueError" and "boom" in failed["exc"]
    assert failed["offset"] == 3
    assert library["event"] == "log_line" and library["message"] == "Heartbeat failed for group g1"
    assert plain["event"] == "cache_synced" and plain["items"] == 5


def test_level_filters(lines) -> None:
    configure_logging("planner", "WARNING", stream=io.StringIO())
    log = get_logger("shoal.test")
    log.info("not_shown")
    assert not logging.getLogger().isEnabledFor(logging.INFO)


def test_a_lone_surrogate_from_hostile_input_is_still_one_json_line(lines) -> None:
    get_logger("services.admission").info("admission_review", uid="\ud800", message="x")  # a review's uid
    [doc] = lines()
    assert doc["uid"] == "\ud800" and doc["event"] == "admission_review"

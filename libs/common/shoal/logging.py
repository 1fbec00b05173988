"""Structured JSON logs: one JSON object per line with `ts`, `level`, `event` (snake_case), `logger`,
`service` and the event's fields as keys.

Usage::

    configure_logging("planner", settings.log_level)
    log = get_logger(__name__)
    log.info("plan_published", shard="pool-a", revision=42, binds=7)
    # {"ts":"2026-11-29T16:00:00.123Z","level":"info","event":"plan_published","logger":"services.planner.app",
    #  "service":"planner","shard":"pool-a","revision":42,"binds":7}

Plain `logging` calls work too: `extra={"fields": {...}}` (or any other extra key) becomes fields. A message
that is not a snake_case event (third-party libraries) is logged as event `log_line` with the text in `message`.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import IO, Any

import msgspec

_EVENT = re.compile(r"^[a-z][a-z0-9_]*$")
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "fields"}
_encoder = msgspec.json.Encoder(enc_hook=str)


class JsonFormatter(logging.Formatter):
    """Formats each record as one JSON object on one line."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"),
            "level": record.levelname.lower(),
        }
        if _EVENT.match(text):
            doc["event"] = text
        else:
            doc["event"] = "log_line"
            doc["message"] = text
        doc["logger"] = record.name
        doc["service"] = self.service
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                doc.setdefault(key, value)
        for key, value in (getattr(record, "fields", None) or {}).items():
            doc.setdefault(key, value)
        if record.exc_info:
            doc["exc_type"] = record.exc_info[0].__name__ if record.exc_info[0] else None
            doc["exc"] = self.formatException(record.exc_info)
        try:
            return _encoder.encode(doc).decode()
        except UnicodeEncodeError:  # a lone surrogate from hostile input (a review's uid, a message's key)
            return json.dumps(doc, default=str)


def configure_logging(service: str, level: str = "INFO", stream: IO[str] | None = None) -> None:
    """Send every logger's records, as JSON lines, to `stream` (stderr by default). Call once at start-up."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("aiokafka", "kafka"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


class EventLogger:
    """A logger whose calls take an event name and keyword fields: `log.info("bound", pod="ns/p")`."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    def _log(self, level: int, event: str, exc_info: Any, fields: dict[str, Any]) -> None:
        if self.logger.isEnabledFor(level):
            self.logger.log(level, event, exc_info=exc_info, extra={"fields": fields}, stacklevel=3)

    def debug(self, event: str, **fields: Any) -> None:
        self._log(logging.DEBUG, event, None, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log(logging.INFO, event, None, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log(logging.WARNING, event, None, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._log(logging.ERROR, event, None, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error with the current exception's traceback (call inside `except`)."""
        self._log(logging.ERROR, event, True, fields)


def get_logger(name: str) -> EventLogger:
    return EventLogger(logging.getLogger(name))

"""Small shared helpers for ingest: problems, metadata access, timestamps, durations, uids."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from shoal.core.ingest.grouping import stable_uid


@dataclass(frozen=True, order=True)
class Problem:
    """Something wrong with input object number `index`: `field` names where, `message` what."""

    index: int
    field: str
    message: str


class IngestError(ValueError):
    """Raised inside a parser; turned into a Problem for the object being read."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def as_map(value: object, field: str, *, required: bool = False) -> Mapping:
    if type(value) is dict:
        return value
    if value is None:
        if required:
            raise IngestError(field, "is required")
        return {}
    if not isinstance(value, Mapping):
        raise IngestError(field, "must be a mapping")
    return value


def as_list(value: object, field: str) -> list:
    if type(value) is list:
        return value
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise IngestError(field, "must be a list")
    return list(value)


def str_map(value: object, field: str) -> dict[str, str]:
    if not value:
        return {}
    data = as_map(value, field)
    return {str(k): "" if v is None else str(v) for k, v in data.items()}


def metadata(obj: Mapping) -> Mapping:
    meta = as_map(obj.get("metadata"), "metadata", required=True)
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise IngestError(f"metadata.{key}", f"must be a mapping of strings, got {type_name(value)}")
    return meta


def type_name(value: object) -> str:
    """A value's type as a manifest's author reads it: "a list", "a string", "a number", "a mapping"."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return "an empty string" if not value else "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__


def name_of(obj: Mapping) -> str:
    name = metadata(obj).get("name")
    if not isinstance(name, str) or not name:
        raise IngestError("metadata.name", "is required")
    return name


def namespace_of(obj: Mapping) -> str:
    ns = metadata(obj).get("namespace")
    return str(ns) if ns else "default"


def uid_of(obj: Mapping, kind: str) -> str:
    meta = metadata(obj)
    uid = meta.get("uid")
    if uid:
        return str(uid)
    return stable_uid(kind, str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


def parse_time(value: object, field: str) -> datetime:
    """RFC3339 (or an epoch number) as an aware UTC datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError):
            raise IngestError(field, f"invalid timestamp {value!r}") from None
    if not isinstance(value, str) or not value:
        raise IngestError(field, f"invalid timestamp {value!r}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise IngestError(field, f"invalid RFC3339 timestamp {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def format_time(moment: datetime) -> str:
    """Canonical RFC3339 in UTC with a Z suffix (sortable as text)."""
    moment = moment.astimezone(UTC)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@lru_cache(maxsize=8192)
def _norm_text(value: str) -> str:
    return format_time(parse_time(value, ""))


def norm_time(value: object, field: str) -> str:
    if type(value) is str:
        try:
            return _norm_text(value)
        except IngestError:
            raise IngestError(field, f"invalid RFC3339 timestamp {value!r}") from None
    return format_time(parse_time(value, field))


def add_seconds(timestamp: str, seconds: float) -> str:
    return format_time(parse_time(timestamp, "now") + timedelta(seconds=seconds))


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: object, field: str) -> int:
    """A Go/metav1 duration ("90s", "2m0s", "1h30m", "-1s") or a number of seconds, as whole seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value != value or value in (float("inf"), float("-inf")):
            raise IngestError(field, f"invalid duration {value!r}")
        return int(value)
    if not isinstance(value, str) or not value.strip():
        raise IngestError(field, f"invalid duration {value!r}")
    text = value.strip()
    sign = 1
    if text[0] in "+-":
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if text == "0":
        return 0
    pos, total = 0, 0.0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if not match:
            raise IngestError(field, f"invalid duration {value!r}")
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    return sign * int(total)

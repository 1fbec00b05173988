"""The base of every wire message: a frozen msgspec Struct tagged by `type`, with a `meta` header.

Consumers de-duplicate on `meta.id`; `meta.revision` is the snapshot revision the message was
derived from (0 when not applicable). New fields are added with defaults so old consumers keep
decoding newer messages (msgspec ignores unknown fields).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec


class Meta(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    produced_at: str
    producer: str
    revision: int = 0
    trace_id: str = ""


class Message(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    meta: Meta


def new_meta(producer: str, *, revision: int = 0, trace_id: str = "", id: str | None = None) -> Meta:
    """A header for a new message; `id` may be given to make re-publishing idempotent."""
    return Meta(
        id=id or uuid.uuid4().hex,
        produced_at=datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        producer=producer,
        revision=revision,
        trace_id=trace_id,
    )

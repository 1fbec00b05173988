"""The public decision stream `shoal.decisions.v1`: one CloudEvents-style JSON event per decision.

Users subscribe to it; its JSON Schema lives in tests/contracts/decision.schema.json and a test
checks every event the services emit against it. Add fields only with defaults.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec

KINDS = ("scheduled", "pipelined", "unschedulable", "evicted", "bound", "bind-failed", "gpu-shared")


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    specversion: str = "1.0"
    id: str
    source: str  # e.g. shoal/planner/<shard>
    type: str  # io.shoal.decision.<kind>
    time: str
    subject: str  # ns/pod or ns/podgroup
    datacontenttype: str = "application/json"
    shard: str = ""
    planid: str = ""
    revision: int = 0
    data: dict = {}


def decision(kind: str, *, source: str, subject: str, shard: str, plan_id: str = "", revision: int = 0,
             data: dict | None = None, id: str | None = None) -> Decision:
    if kind not in KINDS:
        raise ValueError(f"unknown decision kind {kind!r}")
    return Decision(
        id=id or uuid.uuid4().hex,
        source=source,
        type=f"io.shoal.decision.{kind}",
        time=datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        subject=subject,
        shard=shard,
        planid=plan_id,
        revision=revision,
        data=data or {},
    )

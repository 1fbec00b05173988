"""Kubernetes objects → the core's Snapshot (pure; YAML/JSON parsing lives in the CLI/services).

Public API:
- `snapshot_from_objects(objects, *, now, revision=0, config_doc=None) -> IngestResult`
- `expand_workloads(objects)` / `recreate_pod(pod, name)`: controller behaviour for `shoal simulate`
- `Problem`, `IngestResult`, `IngestSettings`, quantity helpers in `shoal.core.ingest.quantity`.
"""

from shoal.core.ingest.common import (
    Problem,
    add_seconds,
    format_time,
    parse_duration,
    parse_time,
)
from shoal.core.ingest.config import IngestSettings, config_from
from shoal.core.ingest.controllers import expand_workloads, recreate_pod
from shoal.core.ingest.snapshot import IngestResult, TopologyLevel, snapshot_from_objects

__all__ = [
    "IngestResult",
    "add_seconds",
    "IngestSettings",
    "Problem",
    "TopologyLevel",
    "config_from",
    "expand_workloads",
    "format_time",
    "parse_duration",
    "parse_time",
    "recreate_pod",
    "snapshot_from_objects",
]

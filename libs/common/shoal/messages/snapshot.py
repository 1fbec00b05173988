"""Cluster snapshots: what the snapshotter stores in Redis and announces on Kafka.

A snapshot is the shard's Kubernetes objects as plain dicts (the shape of YAML manifests, trimmed
to the fields the core reads) plus the decisions still in flight. It is the same input
`shoal simulate` replays, so any published snapshot can be dumped and replayed offline.
"""

from __future__ import annotations

import msgspec

from shoal.messages.base import Message


class InFlightBind(msgspec.Struct, frozen=True, kw_only=True):
    """A bind the planner decided that the cluster does not show yet; counts as allocated."""

    pod: str  # ns/name
    pod_uid: str
    node: str
    gpu_groups: tuple[str, ...] = ()
    plan_id: str
    expires_at: float  # epoch seconds; a bind never confirmed stops counting after this


class ClusterSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    shard: str
    revision: int
    taken_at: str  # RFC3339
    objects: tuple[dict, ...]
    inflight: tuple[InFlightBind, ...] = ()


class SnapshotPublished(Message, frozen=True, kw_only=True, tag="snapshot_published"):
    shard: str
    revision: int
    nodes: int = 0
    pods: int = 0
    pending_pods: int = 0

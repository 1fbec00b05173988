"""Cluster snapshots: what the snapshotter stores in Redis and announces on Kafka.

A shard's snapshot is typed: the core's own structs (`shoal.core.ingest.shard_model`), stored as a base (the
whole model, in parts of a few MB) plus one delta per revision (what that revision added, replaced or
removed). Every delta names the chain it continues (`chain`: the base it grew from), so a reader that kept the
model of revision N applies deltas N+1… and never mixes two writers' histories. Decisions in flight are not
in the snapshot: planners read them from their own Redis hash (`shoal.adapters.inflight`).
"""

from __future__ import annotations

import msgspec

from shoal.core.ingest.shard_model import Changes
from shoal.messages.base import Message


class InFlightBind(msgspec.Struct, frozen=True, kw_only=True):
    """A decision the planner made that the cluster does not show yet: a bind (counts as allocated on `node`)
    or, with `eviction`, an eviction (the victim counts as releasing: the next cycle does not evict again
    for the same need)."""

    pod: str  # ns/name
    pod_uid: str
    node: str
    gpu_groups: tuple[str, ...] = ()
    plan_id: str
    expires_at: float  # epoch seconds; a decision never confirmed stops counting after this
    eviction: bool = False
    ttl_s: float = 0.0  # how long the planner gave it: the binder renews a lease by this much while it works on
    # the bind (0: never renewed)


SNAPSHOT_SCHEMA = 1  # raised when a change to the stored structs would be misread by an older reader


class SnapshotBase(msgspec.Struct, frozen=True, kw_only=True):
    """The header of a base: the whole model of `revision` is in `parts` msgpack Entries values."""

    shard: str
    revision: int
    chain: str  # new for every base; the deltas that follow it carry the same value
    taken_at: str  # RFC3339
    parts: int
    require_podgroup: bool = False  # pending pods wait for their PodGroup (assemble's require_podgroup)
    schema: int = 1  # SNAPSHOT_SCHEMA of the writer; absent (older writers) means 1


class SnapshotDelta(msgspec.Struct, frozen=True, kw_only=True):
    """What `revision` changed in the model of `revision - 1` (of the same chain)."""

    shard: str
    revision: int
    chain: str
    taken_at: str
    changes: Changes = Changes()
    require_podgroup: bool = False
    schema: int = 1


class SnapshotPublished(Message, frozen=True, kw_only=True, tag="snapshot_published"):
    shard: str
    revision: int
    nodes: int = 0
    pods: int = 0
    pending_pods: int = 0
    chain: str = ""  # the chain (base) the revision belongs to; "" from older snapshotters

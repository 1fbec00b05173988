"""The one list of Kafka topics Shoal uses, their keys and payload types.

Topics are `shoal.<stream>.v<N>`. Every topic is keyed by shard (node pool) unless noted, so one
partition holds one shard's messages in order and one consumer owns a shard at a time.
An optional prefix (settings `SHOAL_TOPIC_PREFIX`, used by tests) is prepended to every name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topic:
    name: str
    key: str
    payload: str
    partitions: int = 4

    def full(self, prefix: str = "") -> str:
        return f"{prefix}{self.name}"


SNAPSHOTS = Topic("shoal.snapshots.v1", key="shard", payload="SnapshotPublished")
FAIRSHARE = Topic("shoal.fairshare.v1", key="shard", payload="FairShareComputed")
PLANS = Topic("shoal.plans.v1", key="shard", payload="PlanIssued")
BIND_RESULTS = Topic("shoal.bind-results.v1", key="shard", payload="BindResult")
DECISIONS = Topic("shoal.decisions.v1", key="shard", payload="Decision (CloudEvents JSON)")
GPU_USAGE = Topic("shoal.gpu-usage.v1", key="node", payload="GpuUsage")

ALL = (SNAPSHOTS, FAIRSHARE, PLANS, BIND_RESULTS, DECISIONS, GPU_USAGE)


def dlq(topic_name: str) -> str:
    """The dead-letter topic for undecodable messages of `topic_name`."""
    return f"{topic_name}.dlq"

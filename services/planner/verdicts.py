"""Which pending verdicts go out on the decision stream: each once, when it changes (pure).

A verdict is a pending PodGroup's reason and message (the plan's SetCondition). The planner plans every shard
again on each snapshot, heartbeats included, so the same verdict comes out of every cycle; the decision stream
carries it only when it is new for that PodGroup, its reason or its message changed, or it was last published
`reassert_s` ago (0: never again). What was published last is kept per shard (`shoal.adapters.verdicts`, in
Redis), so a restarted planner, or one that takes a shard over, goes on from there instead of flooding.

A PodGroup's entry is dropped when it is no longer pending (a pod of it bound or pipelined, its condition
cleared) or it left the snapshot, so a later verdict about it is news again.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass

from shoal.adapters.verdicts import Verdict
from shoal.core.model import PodGroup, group_order
from shoal.core.plan import Bind, ClearCondition, Pipeline, Plan, SetCondition


@dataclass(frozen=True)
class VerdictChanges:
    publish: frozenset[str]  # pod groups whose `unschedulable` decision goes out this cycle
    store: dict[str, Verdict]  # entries to write once that is published
    drop: frozenset[str]  # entries to remove


class SnapshotGroups(Container[str]):
    """The "ns/name" keys of a Snapshot's pod groups (sorted by namespace, name), looked up by bisection:
    the few published verdicts are checked against 140k groups without a set of their keys each cycle."""

    def __init__(self, groups: Sequence[PodGroup]) -> None:
        self.groups = groups

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.find(key) is not None

    def find(self, key: str) -> PodGroup | None:
        namespace, _, name = key.partition("/")
        at = bisect_left(self.groups, (namespace, name), key=group_order)
        found = at < len(self.groups) and group_order(self.groups[at]) == (namespace, name)
        return self.groups[at] if found else None


def verdict_changes(plan: Plan, known: Mapping[str, Verdict], *, pod_groups: Container[str], now_s: float,
                    reassert_s: float) -> VerdictChanges:
    """What this plan's verdicts change, given the ones published before (`known`, pod group → Verdict) and
    the pod groups of the snapshot ("ns/name"; `SnapshotGroups` for a Snapshot's)."""
    publish, store = set(), {}
    for op in plan.of(SetCondition):
        before = known.get(op.pod_group)
        if (before is None or before.reason != op.reason or before.message != op.message
                or (reassert_s > 0 and now_s - before.published_s >= reassert_s)):
            publish.add(op.pod_group)
            store[op.pod_group] = Verdict(reason=op.reason, message=op.message, published_s=now_s)
    pending = {op.pod_group for op in plan.of(SetCondition)}
    moving = {op.pod_group for op in plan.ops if isinstance(op, Bind | Pipeline | ClearCondition)}
    drop = {pg for pg in known if pg not in pending and (pg in moving or pg not in pod_groups)}
    return VerdictChanges(publish=frozenset(publish), store=store, drop=frozenset(drop))

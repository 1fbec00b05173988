"""A shard model's pods as the core Snapshot counts them, kept between cycles (what `assemble` reads).

A pod entry's place in the Snapshot depends on the entry, on whether the PodGroup it names exists, and on
the shard's scheduler names; it changes for a handful of pods per revision while the model holds 140k, so
translating every entry again each cycle (~0.3 s at 4,000 nodes) was most of the assembly. `PodAssembly`
keeps each pod's counted form by uid, the PodGroup each names and the podgrouper's generated PodGroups,
and redoes only the pods that changed or whose PodGroup appeared or went (`refresh`); a change of the
scheduler names or of `require_podgroup` redoes them all. What varies every cycle — binds and evictions in
flight — is laid over the kept pods by position (`overlay`), never stored in them; the pods it lays over
are the same objects from cycle to cycle while their bind or eviction is (`Derived`).

The counted form of one entry (`counted`) is the single rule; a full pass and the incremental one both use
it, and `tests/unit/core/test_pod_assembly.py` checks that they give the same pods on random changes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import msgspec

from shoal.core.ingest.key_order import KeyOrder
from shoal.core.kai_labels import gpu_group_labels, gpu_groups_of
from shoal.core.model import Pod, PodGroup, pod_order


def _entry_order(entry) -> tuple[str, str, str]:
    return pod_order(entry.pod)


def counted(entry, managed: frozenset[str], require_podgroup: bool,
            groups: Mapping[str, PodGroup]) -> tuple[Pod | None, str | None, tuple[str, PodGroup] | None]:
    """(the pod as counted or None when left out, the PodGroup key it depends on, (pod key, generated
    PodGroup) when it names a PodGroup that does not exist and the podgrouper made one for it)."""
    pod = entry.pod
    if entry.scheduler not in managed:
        return msgspec.structs.replace(pod, managed=False, pod_group="", subgroup=None), None, None
    group_key = f"{pod.namespace}/{pod.pod_group}"
    exists = group_key in groups
    if require_podgroup and not pod.node_name and not (entry.named and exists) and not entry.bare:
        return None, group_key, None  # waits until the PodGroup it names exists (a bare pod is grouped here)
    if exists:
        return pod, group_key, None
    if entry.named and pod.subgroup != entry.missing_subgroup:
        pod = msgspec.structs.replace(pod, subgroup=entry.missing_subgroup)
    return pod, group_key, ((pod.key, entry.generated) if entry.generated is not None else None)


def placed(pod: Pod, node: str, gpu_groups: tuple[str, ...]) -> Pod:
    """A pending pod as it counts while its bind is in flight: on `node`, in `gpu_groups` (runai-gpu-group)."""
    labels = {**pod.labels, **gpu_group_labels(gpu_groups)}
    return msgspec.structs.replace(pod, node_name=node, labels=labels, gpu_groups=gpu_groups_of(labels))


class Derived:
    """Pods made from a kept pod each cycle (placed for a bind in flight, releasing for an eviction, blocked
    by a PDB), handed over as the same object while the source object and the reason stay the same: every
    cycle would otherwise make a few thousand new objects at a busy shard, and the session's kept pass (which
    tells changed pods by identity) would count them all again. Only what the last cycle made is kept."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[Pod, object, Pod]] = {}  # uid → (source, reason, made)
        self.now: dict[str, tuple[Pod, object, Pod]] = {}

    def get(self, pod: Pod, reason: object, make: Callable[[], Pod]) -> Pod:
        old = self.last.get(pod.uid)
        made = old[2] if old is not None and old[0] is pod and old[1] == reason else make()
        self.now[pod.uid] = (pod, reason, made)
        return made

    def done(self) -> None:
        """End of a cycle: what was not asked for this cycle is forgotten."""
        self.last, self.now = self.now, {}


@dataclass
class PodAssembly:
    order: KeyOrder = field(default_factory=lambda: KeyOrder(_entry_order))
    settings: tuple[frozenset[str], bool] | None = None  # (scheduler names, require_podgroup) of the kept pods
    kept: dict[str, Pod] = field(default_factory=dict)  # uid → the pod as counted (pods left out: absent)
    depends: dict[str, str] = field(default_factory=dict)  # uid → the PodGroup key its counted form read
    members: dict[str, set[str]] = field(default_factory=dict)  # PodGroup key → uids that read it
    generated: dict[str, dict[str, tuple[str, PodGroup]]] = field(default_factory=dict)  # key → uid → (pod key, group)
    pending: dict[str, set[str]] = field(default_factory=dict)  # "ns/name" of a kept pod on no node → uids
    derived: Derived = field(default_factory=Derived)  # the overlay's placed and releasing pods

    def refresh(self, pods: Mapping, groups: Mapping[str, PodGroup], *, managed: frozenset[str],
                require_podgroup: bool, touched_pods: Collection[str], touched_groups: Collection[str]) -> None:
        """Bring the kept pods up to date with the model's `pods` (uid → entry) and `groups`."""
        for uid in touched_pods:
            self.order.touch(uid)
        if self.settings != (managed, require_podgroup):
            self.settings = (managed, require_podgroup)
            redo: Collection[str] = list(pods)
            self.kept, self.depends, self.members, self.generated, self.pending = {}, {}, {}, {}, {}
        else:
            redo = set(touched_pods)
            for key in touched_groups:
                redo.update(self.members.get(key, ()))
        for uid in redo:
            self._forget(uid)
            entry = pods.get(uid)
            if entry is not None:
                self._keep(uid, *counted(entry, managed, require_podgroup, groups))

    def pods(self, pods: Mapping) -> list[Pod]:
        """The kept pods in snapshot order (pods: the model's uid → entry, for the order)."""
        return list(filter(None, map(self.kept.get, self.order.keys(pods))))

    def generated_groups(self) -> list[PodGroup]:
        """The podgrouper's PodGroup of each missing PodGroup key: the one of its first pod by "ns/name"."""
        return [min(by_uid.items(), key=lambda item: (item[1][0], item[0]))[1][1]
                for _, by_uid in sorted(self.generated.items())]

    def overlay(self, pods: list[Pod], inflight: Mapping[str, tuple[str, tuple[str, ...]]],
                evicting: Collection[str]) -> list[Pod]:
        """`pods` (snapshot order) with binds in flight placed and evictions in flight releasing."""
        derived, kept, pending = self.derived, self.kept, self.pending
        changes: dict[str, Pod] = {}
        for key, bind in inflight.items():  # by the pod's own uid, else by "ns/name" (a recreated pod)
            pod = kept.get(key)
            if pod is not None:
                if pod.node_name is None:
                    changes[key] = derived.get(pod, bind, lambda pod=pod, to=bind: placed(pod, *to))
                continue
            for uid in pending.get(key, ()):
                pod = kept[uid]
                if uid not in changes and uid not in inflight:  # its own uid's bind wins
                    changes[uid] = derived.get(pod, bind, lambda pod=pod, to=bind: placed(pod, *to))
        for uid in evicting:
            pod = kept.get(uid)
            if pod is not None and pod.node_name and not pod.deleting:
                changes[uid] = derived.get(pod, True, lambda pod=pod: msgspec.structs.replace(pod, deleting=True))
        derived.done()
        if not changes:
            return pods
        if len(changes) * 16 > len(pods):  # many: one pass is cheaper than a binary search each
            return [changes.get(pod.uid, pod) for pod in pods]
        out = list(pods)
        for pod in changes.values():
            out[bisect_left(out, pod_order(pod), key=pod_order)] = pod
        return out

    def _keep(self, uid: str, pod: Pod | None, group_key: str | None, gen: tuple[str, PodGroup] | None) -> None:
        if group_key is not None:
            self.depends[uid] = group_key
            self.members.setdefault(group_key, set()).add(uid)
        if pod is None:
            return
        self.kept[uid] = pod
        if gen is not None and group_key is not None:
            self.generated.setdefault(group_key, {})[uid] = gen
        if pod.node_name is None:
            self.pending.setdefault(pod.key, set()).add(uid)

    def _forget(self, uid: str) -> None:
        pod = self.kept.pop(uid, None)
        group_key = self.depends.pop(uid, None)
        if group_key is not None:
            _discard(self.members, group_key, uid)
            by_uid = self.generated.get(group_key)
            if by_uid is not None and by_uid.pop(uid, None) is not None and not by_uid:
                del self.generated[group_key]
        if pod is not None and pod.node_name is None:
            _discard(self.pending, pod.key, uid)


def _discard(index: dict[str, set[str]], key: str, uid: str) -> None:
    uids = index.get(key)
    if uids is not None:
        uids.discard(uid)
        if not uids:
            del index[key]

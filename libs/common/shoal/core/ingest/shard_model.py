"""One shard's cluster as typed entries, kept up to date object by object (the services' snapshot).

The snapshotter translates each watched object once, when it changes (`entry_of`), into the core's types and
keeps one ShardModel per shard; what changed in a revision travels as `Changes`, now and then the whole model
as `Entries`. The planner and fairshare keep their own ShardModel by applying the same Changes, and `assemble`
turns it into the core Snapshot. What depends on several objects is settled there, in one pass over typed
values: PodGroup membership (the podgrouper's group for a pod whose named one does not exist), pending pods
without a PodGroup left out, the planner's scheduler names and partition, PodDisruptionBudgets, and decisions
in flight (a pod the binder is binding counts as placed). `assemble` gives what `snapshot_from_objects` gives
for the same objects (tests/unit/core/test_shard_model.py checks it on generated clusters).
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

import msgspec

from shoal.core.ingest.assembly import Derived, PodAssembly
from shoal.core.ingest.common import IngestError, Problem, metadata, name_of, namespace_of
from shoal.core.ingest.config import NOTHING_GIVEN, Given, config_from
from shoal.core.ingest.grouping import (
    POD_GROUP_ANNOTATION,
    SUBGROUP_LABEL,
    OwnerIndex,
    controller_ref,
    group_pod,
    skips_podgrouper,
)
from shoal.core.ingest.key_order import REBUILD_FRACTION, KeyOrder
from shoal.core.ingest.nodes import node_from
from shoal.core.ingest.pdbs import blocked_pod_keys
from shoal.core.ingest.podgroups import podgroup_from
from shoal.core.ingest.pods import pod_from
from shoal.core.ingest.queues import SHIPPED_PRIORITY_CLASSES, priority_class_from, queue_from
from shoal.core.ingest.snapshot import IngestResult, TopologyLevel, topology_from
from shoal.core.model import (
    Node,
    Pod,
    PodGroup,
    PriorityClass,
    Queue,
    Topology,
    group_order,
    make_snapshot,
)

DEFAULT_SCHEDULER = "default-scheduler"
_NO_OWNERS = OwnerIndex(())


class PodEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A pod as translated, with what its PodGroup membership needs once the other objects are known."""

    pod: Pod  # pod_group: its pod-group-name, else the podgrouper's name for it
    scheduler: str = DEFAULT_SCHEDULER  # spec.schedulerName
    named: bool = False  # pod.pod_group comes from the pod-group-name annotation
    missing_subgroup: str | None = None  # the pod's subgroup when the named PodGroup does not exist
    generated: PodGroup | None = None  # the podgrouper's PodGroup, used when none by that name exists
    # no owner, and no pod-group-name but the podgrouper's own: the podgrouper groups it by the pod alone, with
    # the rules that made `generated`, so it need not wait for the podgrouper's writes (`assembly.counted`)
    bare: bool = False


class Entries(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Typed objects of one shard: the whole model (a base) or what a revision adds or replaces."""

    nodes: tuple[Node, ...] = ()
    pods: tuple[PodEntry, ...] = ()
    pod_groups: tuple[PodGroup, ...] = ()
    queues: tuple[Queue, ...] = ()
    priority_classes: tuple[PriorityClass, ...] = ()
    topologies: tuple[Topology, ...] = ()
    pdbs: tuple[dict, ...] = ()  # PodDisruptionBudget manifests (metadata, spec.selector, status)


class Removed(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Keys of the objects a revision removes (see `key_of`)."""

    nodes: tuple[str, ...] = ()
    pods: tuple[str, ...] = ()
    pod_groups: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    priority_classes: tuple[str, ...] = ()
    topologies: tuple[str, ...] = ()
    pdbs: tuple[str, ...] = ()


class Changes(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    upserts: Entries = Entries()
    removed: Removed = Removed()

    def empty(self) -> bool:
        return self == _NO_CHANGES


_NO_CHANGES = Changes()
FIELDS = ("nodes", "pods", "pod_groups", "queues", "priority_classes", "topologies", "pdbs")
KIND_FIELD = {"Node": "nodes", "Pod": "pods", "PodGroup": "pod_groups", "Queue": "queues",
              "PriorityClass": "priority_classes", "Topology": "topologies", "PodDisruptionBudget": "pdbs"}


def key_of(item: object) -> str:
    """The key an entry is kept under: pods by uid, namespaced objects by ns/name, the others by name."""
    if isinstance(item, PodEntry):
        return item.pod.uid
    if isinstance(item, PodGroup):
        return item.key
    if isinstance(item, dict):
        meta = item.get("metadata") or {}
        return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
    return item.name  # type: ignore[attr-defined]


def pod_entry(obj: Mapping, *, now: str, class_names: Iterable[str]) -> PodEntry:
    """A pod manifest as an entry (raises IngestError as pod_from does)."""
    meta = metadata(obj)
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    named = str(annotations.get(POD_GROUP_ANNOTATION) or "")
    label_subgroup = str(labels[SUBGROUP_LABEL]) if labels.get(SUBGROUP_LABEL) else None
    generated: PodGroup | None = None
    bare = False
    if skips_podgrouper(obj):  # its PodGroup is made elsewhere: only the one it names, if any
        name, missing_subgroup = named, label_subgroup
    else:
        grouping = group_pod(obj, _NO_OWNERS, list(class_names))
        own_name = str(grouping.podgroup["metadata"]["name"])
        name = named or own_name
        missing_subgroup = label_subgroup if label_subgroup is not None else grouping.subgroup
        grouping.podgroup["metadata"]["name"] = name
        try:
            generated = msgspec.structs.replace(podgroup_from(grouping.podgroup, now), generated=True)
        except IngestError:
            generated = None
        # the podgrouper's own pod-group-name (same name) leaves it bare: the pod's annotation may be seen before
        # its PodGroup (two watches), and a pod in flight must never drop out of the snapshot meanwhile
        bare = generated is not None and controller_ref(obj) is None and name == own_name
    pod = pod_from(obj, pod_group=name, subgroup=label_subgroup if named else missing_subgroup, managed=True,
                   now=now)
    return PodEntry(pod=pod, scheduler=str(spec.get("schedulerName") or DEFAULT_SCHEDULER), named=bool(named),
                    missing_subgroup=missing_subgroup, generated=generated, bare=bare)


def entry_of(obj: Mapping, *, now: str, class_names: Iterable[str] = ()) -> object:
    """A watched object as the entry its kind is kept as; raises IngestError for a broken one."""
    kind = obj.get("kind")
    if kind == "Pod":
        return pod_entry(obj, now=now, class_names=class_names)
    if kind == "Node":
        return node_from(obj)
    if kind == "PodGroup":
        return podgroup_from(obj, now)
    if kind == "Queue":
        return queue_from(obj)
    if kind == "PriorityClass":
        return priority_class_from(obj)
    if kind == "Topology":
        name, levels = topology_from(obj)
        return Topology(name=name, levels=tuple(lv.node_label for lv in levels),
                        aliases=tuple(lv.alias for lv in levels))
    if kind == "PodDisruptionBudget":
        metadata(obj)
        name_of(obj)
        spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
        meta = obj.get("metadata") or {}
        return {"metadata": {"name": meta.get("name"), "namespace": namespace_of(obj)},
                "spec": {"selector": spec.get("selector")}, "status": obj.get("status") or {}}
    raise IngestError("kind", f"{kind!r} is not kept in a shard's snapshot")


@dataclass
class _Kept:
    """What `assemble` keeps between cycles for one model, and the pod/PodGroup keys changed since."""

    pods: PodAssembly = field(default_factory=PodAssembly)
    groups: KeyOrder = field(default_factory=lambda: KeyOrder(group_order))
    touched_pods: set[str] = field(default_factory=set)
    touched_groups: set[str] = field(default_factory=set)
    blocked: Derived = field(default_factory=Derived)  # pods a PDB keeps from eviction, as last cycle's objects


@dataclass
class ShardModel:
    """The typed objects of one shard, by key (mutable: `apply` a revision's Changes, or `put`/`drop` one
    object — pods and PodGroups must change only through these, as `assemble` keeps work between cycles)."""

    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[str, PodEntry] = field(default_factory=dict)
    pod_groups: dict[str, PodGroup] = field(default_factory=dict)
    queues: dict[str, Queue] = field(default_factory=dict)
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    topologies: dict[str, Topology] = field(default_factory=dict)
    pdbs: dict[str, dict] = field(default_factory=dict)
    kept: _Kept | None = field(default=None, repr=False, compare=False)  # made by the first assemble

    @classmethod
    def of(cls, entries: Entries) -> ShardModel:
        model = cls()
        model.apply(Changes(upserts=entries))
        return model

    def apply(self, changes: Changes) -> None:
        for name in FIELDS:
            store: dict = getattr(self, name)
            touched = self._touched(name)
            for key in getattr(changes.removed, name):
                store.pop(key, None)
                if touched is not None:
                    touched.add(key)
            for item in getattr(changes.upserts, name):
                key = key_of(item)
                store[key] = item
                if touched is not None:
                    touched.add(key)

    def put(self, name: str, key: str, item: object) -> None:
        """Set one object of the store `name` (one of FIELDS)."""
        getattr(self, name)[key] = item
        touched = self._touched(name)
        if touched is not None:
            touched.add(key)

    def drop(self, name: str, key: str) -> object | None:
        """Remove one object of the store `name`: the object removed, if there was one."""
        old = getattr(self, name).pop(key, None)
        touched = self._touched(name)
        if old is not None and touched is not None:
            touched.add(key)
        return old

    def _touched(self, name: str) -> set[str] | None:
        kept = self.kept
        if kept is None:
            return None  # nothing assembled yet: nothing to keep up to date
        return kept.touched_pods if name == "pods" else kept.touched_groups if name == "pod_groups" else None

    def entries(self) -> Entries:
        return Entries(**{name: tuple(getattr(self, name).values()) for name in FIELDS})

    def size(self) -> int:
        return sum(len(getattr(self, name)) for name in FIELDS)


def _with_generated(groups: list[PodGroup], generated: list[PodGroup]) -> list[PodGroup]:
    """The model's PodGroups (sorted) with the podgrouper's generated ones (keys not in the model) in order."""
    if not generated:
        return groups
    if len(generated) * REBUILD_FRACTION > len(groups):
        return sorted([*groups, *generated], key=group_order)
    for group in generated:
        insort(groups, group, key=group_order)
    return groups


def _refreshed(model: ShardModel, managed: frozenset[str], require_podgroup: bool) -> _Kept:
    """The model's kept pods and PodGroup order, brought up to date with its changes since the last call."""
    kept = model.kept
    if kept is None:
        kept = model.kept = _Kept()
    kept.pods.refresh(model.pods, model.pod_groups, managed=managed, require_podgroup=require_podgroup,
                      touched_pods=kept.touched_pods, touched_groups=kept.touched_groups)
    for key in kept.touched_groups:
        kept.groups.touch(key)
    kept.touched_pods.clear()
    kept.touched_groups.clear()
    return kept


def unplaced_pods(model: ShardModel, *, config_doc: Mapping | None = None,
                  inflight: Mapping[str, tuple[str, tuple[str, ...]]] | None = None,
                  require_podgroup: bool = False) -> int:
    """How many pending pods this scheduler manages `assemble` would show on no node: the pods a cycle may place,
    pipeline or give a verdict (0: each has its bind in flight, or none is pending). Cheap: the kept pods are
    brought up to date as `assemble` does (its next call does not repeat the work)."""
    try:
        _, settings = config_from(config_doc)
    except IngestError:
        _, settings = config_from(None)
    kept = _refreshed(model, frozenset(settings.scheduler_names), require_podgroup)
    inflight, pods = inflight or {}, kept.pods.kept
    return sum(1 for key, uids in kept.pods.pending.items() if key not in inflight
               for uid in uids if uid not in inflight and pods[uid].managed)


def assemble(model: ShardModel, *, now: str, revision: int = 0, config_doc: Mapping | None = None,
             given: Given = NOTHING_GIVEN, inflight: Mapping[str, tuple[str, tuple[str, ...]]] | None = None,
             evicting: Collection[str] = (), require_podgroup: bool = False) -> IngestResult:
    """The core Snapshot of the model. `given`: the service's settings and usage for the config (`Given`);
    `inflight`: pod uid or "ns/name" → (node, GPU groups) of binds in flight; `evicting`: uids of pods whose eviction is in flight (they count as releasing);
    `require_podgroup`: a pending pod waits until the PodGroup it names exists (the services), except a bare
    pod (`PodEntry.bare`), scheduled at once in the PodGroup the podgrouper is making for it."""
    problems: list[Problem] = []
    try:
        shard, settings = config_from(config_doc, given)
    except IngestError as exc:
        problems.append(Problem(-1, exc.field, exc.message))
        shard, settings = config_from(None, given)
    managed = frozenset(settings.scheduler_names)
    inflight = inflight or {}
    classes = {pc.name: pc for pc in SHIPPED_PRIORITY_CLASSES}
    classes.update(model.priority_classes)
    kept = _refreshed(model, managed, require_podgroup)
    pods = kept.pods.overlay(kept.pods.pods(model.pods), inflight, evicting)

    if model.pdbs:
        blocked = blocked_pod_keys(model.pdbs.values(), ((p.key, p.namespace, p.labels) for p in pods if p.node_name))
        if blocked:
            make = kept.blocked.get
            pods = [make(p, True, lambda p=p: msgspec.structs.replace(p, eviction_blocked=True))
                    if p.key in blocked else p for p in pods]
    kept.blocked.done()
    groups = model.pod_groups
    ordered = _with_generated(list(map(groups.__getitem__, kept.groups.keys(groups))), kept.pods.generated_groups())
    nodes = model.nodes
    if settings.partition:  # one shard: its nodes, its pod groups, the pods on them or in them
        nodes = {k: n for k, n in nodes.items() if n.pool == settings.partition}
        ordered = [g for g in ordered if g.node_pool == settings.partition]
        shard_groups = {g.key for g in ordered}
        pods = [p for p in pods
                if (p.node_name in nodes if p.node_name else f"{p.namespace}/{p.pod_group}" in shard_groups)]
    # pods and PodGroups come in snapshot order already: 140k of them need no sort each cycle
    snapshot = make_snapshot(nodes=nodes.values(), pods=pods, pod_groups=ordered, queues=model.queues.values(),
                             priority_classes=classes.values(), config=shard, now=now, revision=revision,
                             topologies=model.topologies.values(), presorted=("pods", "pod_groups"))
    topologies = {t.name: tuple(TopologyLevel(node_label=label, alias=alias) for label, alias in
                                zip(t.levels, t.aliases, strict=False)) for t in model.topologies.values()}
    return IngestResult(snapshot=snapshot, problems=tuple(sorted(problems)), settings=settings,
                        topologies=topologies)

"""Parsed Kubernetes objects (YAML-style or API JSON dicts) → one core Snapshot.

Objects of unknown kinds are ignored here (they may still be owners the podgrouper looks at).
A broken object is reported as a Problem (index = its position in the input, -1 for the
separate config document) and left out; everything else is still built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

import msgspec

from shoal.core.ingest.common import (
    IngestError,
    Problem,
    format_time,
    metadata,
    name_of,
    namespace_of,
    parse_time,
    type_name,
)
from shoal.core.ingest.config import KIND as CONFIG_KIND
from shoal.core.ingest.config import NOTHING_GIVEN, Given, IngestSettings, config_from
from shoal.core.ingest.grouping import (
    POD_GROUP_ANNOTATION,
    SUBGROUP_LABEL,
    OwnerIndex,
    group_pod,
    owner_chain,
    skips_podgrouper,
)
from shoal.core.ingest.nodes import node_from
from shoal.core.ingest.pdbs import blocked_pod_keys
from shoal.core.ingest.podgroups import podgroup_from
from shoal.core.ingest.pods import pod_from
from shoal.core.ingest.queues import SHIPPED_PRIORITY_CLASSES, priority_class_from, queue_from
from shoal.core.model import ShardConfig, Snapshot, Topology, make_snapshot

T = TypeVar("T")
TOPOLOGY_KIND = "Topology"
BIND_REQUEST_KIND = "BindRequest"


@dataclass(frozen=True)
class TopologyLevel:
    node_label: str
    alias: str = ""


@dataclass(frozen=True)
class IngestResult:
    snapshot: Snapshot
    problems: tuple[Problem, ...] = ()
    settings: IngestSettings = field(default_factory=IngestSettings)
    topologies: Mapping[str, tuple[TopologyLevel, ...]] = field(default_factory=dict)
    # PodGroup manifests made by the podgrouper rules for pods that named none, by "ns/name"
    generated_podgroups: Mapping[str, dict] = field(default_factory=dict)
    # "ns/pod" -> (PodGroup name, subgroup) for every managed pod
    pod_groups_of_pods: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)


def topology_from(obj: Mapping) -> tuple[str, tuple[TopologyLevel, ...]]:
    name = name_of(obj)
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    levels = spec.get("levels")
    if not isinstance(levels, list) or not 1 <= len(levels) <= 16:
        raise IngestError("spec.levels", "must be a list of 1 to 16 levels")
    out = []
    for i, level in enumerate(levels):
        if not isinstance(level, Mapping) or not level.get("nodeLabel"):
            raise IngestError(f"spec.levels[{i}].nodeLabel", "is required")
        if level["nodeLabel"] == "kubernetes.io/hostname" and i != len(levels) - 1:
            raise IngestError(f"spec.levels[{i}].nodeLabel", "kubernetes.io/hostname is allowed only as the last level")
        out.append(TopologyLevel(node_label=str(level["nodeLabel"]), alias=str(level.get("alias") or "")))
    return name, tuple(out)


def _now_text(now: object) -> str:
    if isinstance(now, datetime):
        return format_time(now)
    return format_time(parse_time(now, "now"))


def snapshot_from_objects(objects: Sequence[Mapping], *, now: object, revision: int = 0,
                          config_doc: Mapping | None = None, given: Given = NOTHING_GIVEN) -> IngestResult:
    """Build the core Snapshot from parsed objects; see IngestResult for what comes back. `given`: what a
    caller sets besides the SchedulerConfig document (`ingest.config.Given`: usage, sharing mode, namespace)."""
    now_text = _now_text(now)
    reading = _Reading()
    reading.sort(objects)
    shard, settings = reading.config(config_doc, given)
    classes = {pc.name: pc for pc in SHIPPED_PRIORITY_CLASSES}
    classes.update(reading.unique("PriorityClass", priority_class_from, lambda p: p.name))
    queues = reading.unique("Queue", queue_from, lambda q: q.name)
    nodes = reading.unique("Node", node_from, lambda n: n.name)
    groups = reading.unique("PodGroup", lambda o: podgroup_from(o, now_text), lambda g: g.key)
    topologies = dict(reading.unique(TOPOLOGY_KIND, topology_from, lambda t: t[0]).values())
    pods, members = reading.pods(settings, groups, classes, now_text)

    blocked = blocked_pod_keys((obj for _, obj in reading.by_kind.get("PodDisruptionBudget", [])),
                               ((k, p.namespace, p.labels) for k, p in pods.items() if p.node_name))
    for key in blocked:
        pods[key] = msgspec.structs.replace(pods[key], eviction_blocked=True)
    reading.generated_groups(members, pods, groups, now_text)

    if settings.partition:  # one shard: its nodes, its pod groups, the pods on them or in them
        nodes = {k: n for k, n in nodes.items() if n.pool == settings.partition}
        groups = {k: g for k, g in groups.items() if g.node_pool == settings.partition}
        pods = {k: p for k, p in pods.items()
                if (p.node_name in nodes if p.node_name else f"{p.namespace}/{p.pod_group}" in groups)}

    snapshot = make_snapshot(nodes=nodes.values(), pods=pods.values(), pod_groups=groups.values(),
                             queues=queues.values(), priority_classes=classes.values(), config=shard,
                             now=now_text, revision=revision,
                             topologies=[Topology(name=name, levels=tuple(lv.node_label for lv in levels),
                                                  aliases=tuple(lv.alias for lv in levels))
                                         for name, levels in topologies.items()])
    return IngestResult(snapshot=snapshot, problems=tuple(sorted(reading.problems)), settings=settings,
                        topologies=topologies, generated_podgroups=members.generated,
                        pod_groups_of_pods=members.membership)


@dataclass
class _Members:
    """Which PodGroup each managed pod belongs to, and the PodGroups made for pods that named none."""

    generated: dict[str, dict] = field(default_factory=dict)  # "ns/name" → PodGroup manifest
    membership: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # "ns/pod" → (group, subgroup)
    generated_by: dict[str, tuple[int, str]] = field(default_factory=dict)  # generated → (index, key) of its pod


@dataclass
class _Reading:
    """The documents by kind, and the problems found reading them (each with its document's index)."""

    problems: list[Problem] = field(default_factory=list)
    by_kind: dict[str, list[tuple[int, Mapping]]] = field(default_factory=dict)

    def attempt(self, index: int, parse: Callable[[], T]) -> T | None:
        try:
            return parse()
        except IngestError as exc:
            self.problems.append(Problem(index, exc.field, exc.message))
            return None

    def sort(self, objects: Sequence[Mapping]) -> None:
        for index, obj in enumerate(objects):
            if not isinstance(obj, Mapping):
                self.problems.append(Problem(index, "", f"a document must be a mapping, got {type_name(obj)}"))
                continue
            kind = obj.get("kind")
            if not isinstance(kind, str) or not kind:
                self.problems.append(Problem(index, "kind", "is required"))
                continue
            if kind != CONFIG_KIND and self.attempt(index, lambda o=obj: metadata(o)) is None:
                continue
            self.by_kind.setdefault(kind, []).append((index, obj))

    def config(self, config_doc: Mapping | None, given: Given) -> tuple[ShardConfig, IngestSettings]:
        """The separate document, else the one SchedulerConfig among the objects, else the defaults."""
        configs = [(-1, config_doc)] if config_doc is not None else self.by_kind.get(CONFIG_KIND, [])
        if len(configs) > 1:
            self.problems.append(Problem(configs[1][0], "kind", "only one SchedulerConfig document is allowed"))
        parsed = self.attempt(configs[0][0], lambda: config_from(configs[0][1], given)) if configs else None
        return parsed if parsed else config_from(None, given)

    def unique(self, kind: str, parse: Callable[[Mapping], object], key: Callable[[object], str]) -> dict[str, object]:
        out: dict[str, object] = {}
        for index, obj in sorted(self.by_kind.get(kind, []), key=lambda e: e[0]):
            item = self.attempt(index, lambda o=obj: parse(o))
            if item is None:
                continue
            ident = key(item)
            if ident in out:
                self.problems.append(Problem(index, "metadata.name", f"duplicate {kind} {ident!r}"))
                continue
            out[ident] = item
        return out

    def pods(self, settings: IngestSettings, groups: Mapping[str, object], classes: Mapping[str, object],
             now_text: str) -> tuple[dict[str, object], _Members]:
        """Every pod by "ns/name"; a managed pod's PodGroup is the one it names, else one the podgrouper rules
        make for it (`_membership`)."""
        bindings = _bindings(self.by_kind.get(BIND_REQUEST_KIND, []))
        owners = OwnerIndex(obj for entries in self.by_kind.values() for _, obj in entries)
        members = _Members()
        pods: dict[str, object] = {}
        for index, obj in sorted(self.by_kind.get("Pod", []), key=lambda e: (_safe_key(e[1]), e[0])):
            key = _safe_key(obj)
            if key in pods:
                self.problems.append(Problem(index, "metadata.name", f"duplicate Pod {key!r}"))
                continue
            spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
            managed = str(spec.get("schedulerName") or "default-scheduler") in settings.scheduler_names
            group_name, subgroup = "", None
            if managed:
                known = len(members.generated)
                group_name, subgroup = _membership(obj, groups, members.generated, owners, classes)
                members.membership[key] = (group_name, subgroup)
                if len(members.generated) > known:  # this pod made a PodGroup: the last one added
                    members.generated_by[next(reversed(members.generated))] = (index, key)
            binding = bindings.get(key)
            pod = self.attempt(index, lambda o=obj, g=group_name, s=subgroup, m=managed, b=binding:
                               pod_from(o, pod_group=g, subgroup=s, managed=m, now=now_text, binding=b))
            if pod is not None:
                pods[key] = pod
        return pods, members

    def generated_groups(self, members: _Members, pods: Mapping[str, object], groups: dict[str, object],
                         now_text: str) -> None:
        """The PodGroups made for pods join `groups`; one that does not parse is a problem of its pod's."""
        for key, manifest in sorted(members.generated.items()):
            index, pod_key = members.generated_by.get(key, (-1, ""))
            try:
                groups[key] = msgspec.structs.replace(podgroup_from(manifest, now_text), generated=True)
            except IngestError as exc:
                if pod_key in pods or index < 0:  # else the pod's own problem (the same field, copied) says it
                    self.problems.append(Problem(index, f"PodGroup {key} made for it: {exc.field}", exc.message))


def _bindings(entries: list[tuple[int, Mapping]]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """In-flight BindRequests (scheduling.run.ai/v1alpha2) by pod key: the pod counts as placed there."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for _, obj in sorted(entries, key=lambda e: (_safe_key(e[1]), e[0])):
        spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
        status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
        if status.get("phase") == "Failed" or not spec.get("selectedNode"):
            continue
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        pod_name = spec.get("podName") or meta.get("name")
        selected = spec.get("selectedGPUGroups")
        groups = tuple(sorted(str(g) for g in selected)) if isinstance(selected, list) else ()
        out[f"{meta.get('namespace') or 'default'}/{pod_name}"] = (str(spec["selectedNode"]), groups)
    return out


def _safe_key(obj: Mapping) -> str:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def _membership(pod: Mapping, groups: Mapping[str, object], generated: dict[str, dict], owners: OwnerIndex,
                classes: Mapping[str, object]) -> tuple[str, str | None]:
    """The pod's PodGroup name and subgroup: its `pod-group-name` if that exists, else the podgrouper's;
    a pod that skips the podgrouper keeps the name it gives (none is made: a pending one waits for it)."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    namespace = namespace_of(pod)
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    named = str(annotations.get(POD_GROUP_ANNOTATION) or "")
    label_subgroup = str(labels[SUBGROUP_LABEL]) if labels.get(SUBGROUP_LABEL) else None
    if named and f"{namespace}/{named}" in groups:
        return named, label_subgroup
    if skips_podgrouper(pod, owner_chain(pod, owners)):  # its PodGroup is made elsewhere: wait for it
        return named, label_subgroup
    grouping = group_pod(pod, owners, classes)
    name = named or str(grouping.podgroup["metadata"]["name"])
    key = f"{namespace}/{name}"
    if key not in groups and key not in generated:
        manifest = grouping.podgroup
        manifest["metadata"]["name"] = name
        generated[key] = manifest
    return name, label_subgroup if label_subgroup is not None else grouping.subgroup

"""PodGroup manifests (scheduling.run.ai/v2alpha2) → model.PodGroup."""

from __future__ import annotations

from collections.abc import Mapping

from shoal.core.ingest.common import (
    IngestError,
    as_list,
    as_map,
    metadata,
    name_of,
    namespace_of,
    norm_time,
    parse_duration,
    str_map,
    uid_of,
)
from shoal.core.kai_labels import NODE_POOL_LABEL
from shoal.core.model import (
    ANNOTATION_BIND_FAILURES,
    ANNOTATION_LAST_BIND_ERROR,
    ANNOTATION_LAST_BIND_FAILURE,
    ANNOTATION_LAST_EVICTION,
    ANNOTATION_LAST_START,
    ANNOTATION_STALE,
    PodGroup,
    SubGroup,
)

ANNOTATION_PREEMPTION_DELAY = "kai.scheduler/preemption-delay"
ANNOTATION_STALENESS_GRACE = "kai.scheduler/staleness-grace-period"
PREEMPTIBILITY = ("", "preemptible", "non-preemptible", "semi-preemptible")


def _count(value: object, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise IngestError(field, "must be an integer >= 0")
    return value


def _constraint(value: object, field: str) -> tuple[str | None, str | None, str | None]:
    data = as_map(value, field)
    if not data:
        return None, None, None
    return (str(data["topology"]) if data.get("topology") else None,
            str(data["requiredTopologyLevel"]) if data.get("requiredTopologyLevel") else None,
            str(data["preferredTopologyLevel"]) if data.get("preferredTopologyLevel") else None)


def _subgroups(spec: Mapping) -> tuple[SubGroup, ...]:
    out = []
    names: set[str] = set()
    for i, raw in enumerate(as_list(spec.get("subGroups"), "spec.subGroups")):
        field = f"spec.subGroups[{i}]"
        data = as_map(raw, field)
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise IngestError(f"{field}.name", "is required")
        if name in names:
            raise IngestError(f"{field}.name", f"duplicate subgroup name {name!r}")
        names.add(name)
        min_member = _count(data.get("minMember"), f"{field}.minMember")
        min_subgroup = _count(data.get("minSubGroup"), f"{field}.minSubGroup")
        if min_member is not None and min_subgroup is not None:
            raise IngestError(field, "minMember and minSubGroup are mutually exclusive")
        topology, required, preferred = _constraint(data.get("topologyConstraint"), f"{field}.topologyConstraint")
        out.append(SubGroup(name=name, parent=str(data["parent"]) if data.get("parent") else None,
                            min_member=min_member, min_subgroup=min_subgroup, topology=topology,
                            required_level=required, preferred_level=preferred))
    for i, sub in enumerate(out):
        if sub.parent is not None and sub.parent not in names:
            raise IngestError(f"spec.subGroups[{i}].parent", f"unknown parent subgroup {sub.parent!r}")
    parents = {s.name: s.parent for s in out}
    for i, sub in enumerate(out):
        seen: set[str] = set()
        current: str | None = sub.name
        while current is not None:
            if current in seen:
                raise IngestError(f"spec.subGroups[{i}].parent", "subgroup parents form a cycle")
            seen.add(current)
            current = parents.get(current)
    return tuple(sorted(out, key=lambda s: s.name))


def podgroup_from(obj: Mapping, now: str = "") -> PodGroup:
    name = name_of(obj)
    meta = metadata(obj)
    labels = str_map(meta.get("labels"), "metadata.labels")
    annotations = str_map(meta.get("annotations"), "metadata.annotations")
    spec = as_map(obj.get("spec"), "spec")
    status = as_map(obj.get("status"), "status")
    min_member = _count(spec.get("minMember"), "spec.minMember")
    min_subgroup = _count(spec.get("minSubGroup"), "spec.minSubGroup")
    if min_member is not None and min_subgroup is not None:
        raise IngestError("spec", "minMember and minSubGroup are mutually exclusive")
    subgroups = _subgroups(spec)
    preemptibility = str(spec.get("preemptibility") or "")
    if preemptibility not in PREEMPTIBILITY:
        raise IngestError("spec.preemptibility", "must be 'preemptible', 'non-preemptible' or 'semi-preemptible'")
    topology, required, preferred = _constraint(spec.get("topologyConstraint"), "spec.topologyConstraint")
    delay = None
    if spec.get("preemptionDelay") is not None:
        delay = parse_duration(spec["preemptionDelay"], "spec.preemptionDelay")
    elif annotations.get(ANNOTATION_PREEMPTION_DELAY):
        delay = parse_duration(annotations[ANNOTATION_PREEMPTION_DELAY],
                               f"metadata.annotations.{ANNOTATION_PREEMPTION_DELAY}")
    grace = None
    if spec.get("stalenessGracePeriod") is not None:
        grace = parse_duration(spec["stalenessGracePeriod"], "spec.stalenessGracePeriod")
    elif annotations.get(ANNOTATION_STALENESS_GRACE):
        grace = parse_duration(annotations[ANNOTATION_STALENESS_GRACE],
                               f"metadata.annotations.{ANNOTATION_STALENESS_GRACE}")
    backoff = spec.get("schedulingBackoff", -1)
    if backoff not in (-1, 1, None):
        raise IngestError("spec.schedulingBackoff", "only -1 and 1 are supported")
    condition_reason = None
    for raw in as_list(status.get("schedulingConditions"), "status.schedulingConditions")[:1]:
        cond = as_map(raw, "status.schedulingConditions[0]")
        reasons = as_list(cond.get("reasons"), "status.schedulingConditions[0].reasons")
        if reasons and isinstance(reasons[0], Mapping) and reasons[0].get("reason"):
            condition_reason = str(reasons[0]["reason"])

    state = as_map(status.get("schedulingState"), "status.schedulingState")
    core_pods = tuple(sorted(str(p) for p in as_list(state.get("corePods"), "status.schedulingState.corePods")))

    def stamp(key: str) -> str | None:
        return norm_time(annotations[key], f"metadata.annotations.{key}") if annotations.get(key) else None

    failures = annotations.get(ANNOTATION_BIND_FAILURES, "").strip()
    created = meta.get("creationTimestamp")
    if min_member is None:
        min_member = 0 if (subgroups or min_subgroup is not None) else 1
    return PodGroup(
        namespace=namespace_of(obj),
        name=name,
        uid=uid_of(obj, "PodGroup"),
        queue=str(spec.get("queue") or ""),
        min_member=min_member,
        min_subgroup=min_subgroup,
        subgroups=subgroups,
        priority_class_name=str(spec.get("priorityClassName") or ""),
        preemptibility=preemptibility,
        created=norm_time(created, "metadata.creationTimestamp") if created else now,
        node_pool=labels.get(NODE_POOL_LABEL, ""),
        topology=topology,
        required_level=required,
        preferred_level=preferred,
        last_start_timestamp=stamp(ANNOTATION_LAST_START),
        stale_timestamp=stamp(ANNOTATION_STALE),
        last_eviction_timestamp=stamp(ANNOTATION_LAST_EVICTION),
        preemption_delay_s=delay,
        staleness_grace_s=grace,
        mark_unschedulable=spec.get("markUnschedulable") is not False,
        scheduling_backoff=-1 if backoff is None else backoff,
        condition_reason=condition_reason,
        annotations=annotations,
        bind_failures=int(failures) if failures.isdigit() else 0,  # the binder's own count: junk reads as none
        last_bind_failure=stamp(ANNOTATION_LAST_BIND_FAILURE) if failures.isdigit() else None,
        last_bind_error=annotations.get(ANNOTATION_LAST_BIND_ERROR, ""),
        core_pods=core_pods,
    )

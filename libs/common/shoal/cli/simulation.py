"""The `shoal simulate` loop: manifests in, cycles of the real core, results out (no I/O here).

Per cycle: build the snapshot from the current documents (`snapshot_from_objects`), run the core's
`run_cycle`, then act as the cluster: binds take effect (the pod runs on its node, a fractional pod
gets its `runai-gpu-group` label), pipelined pods keep `status.nominatedNodeName` until the next
cycle binds or re-pipelines them (a pod the next cycle leaves pending loses it), evicted pods
disappear and an evicted pod with a controller owner comes back as a new pending pod named
`<pod>-r<cycle>`; PodGroup annotations and scheduling conditions from the plan are written back; the
clock advances by `schedulePeriod` (SchedulerConfig, default 1s).
Before the first cycle the workloads that have no pods get them (`expand_workloads`), objects
without a creationTimestamp get the start time (as the apiserver would stamp them), and pods that
name no PodGroup get the podgrouper's (written back, as the podgrouper service would).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from shoal.core.cycle import run_cycle_timed
from shoal.core.fields import mapping
from shoal.core.ingest import (
    IngestResult,
    Problem,
    add_seconds,
    expand_workloads,
    format_time,
    parse_time,
    recreate_pod,
    snapshot_from_objects,
)
from shoal.core.ingest.common import IngestError
from shoal.core.ingest.grouping import POD_GROUP_ANNOTATION, SUBGROUP_LABEL
from shoal.core.model import ALL_ACTIONS
from shoal.core.plan import Annotate, Bind, ClearCondition, Evict, Pipeline, Plan, SetCondition, SetCorePods
from shoal.core.plan_effects import (
    annotation_patch,
    bound_pod_metadata,
    cleared_condition_patch,
    condition_patch,
    core_pods_patch,
    merge_patch,
    next_condition,
)

DEFAULT_NOW = "2026-01-01T00:00:00Z"
Timer = Callable[[], float]


@dataclass
class CycleRecord:
    cycle: int
    plan: Plan
    snapshot_build_ms: float
    total_duration_ms: float
    action_durations_ms: dict[str, float]
    counters: dict[str, int] = field(default_factory=dict)  # victim-search counters of the cycle


@dataclass
class SimulationResult:
    cycles: list[CycleRecord] = field(default_factory=list)
    documents: list[dict] = field(default_factory=list)  # the cluster after the last cycle
    problems: tuple[Problem, ...] = ()
    last: IngestResult | None = None


def _meta(doc: dict) -> dict:
    return doc.setdefault("metadata", {})


def _submap(meta: dict, key: str) -> dict:
    """metadata.labels or .annotations as a dict to write into (absent or null: a new one)."""
    value = meta.get(key)
    if not isinstance(value, dict):
        value = meta[key] = dict(value or {})
    return value


def _key(doc: Mapping) -> str:
    meta = doc.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def _kind_key(doc: Mapping) -> tuple[str, str]:
    return str(doc.get("kind") or ""), _key(doc)


def _run_core(snapshot, timer: Timer) -> tuple[Plan, float, dict[str, float], dict[str, int]]:
    """The plan, the session-build milliseconds, every action's milliseconds (0 when disabled) and the
    victim-search counters."""
    plan, timings = run_cycle_timed(snapshot, timer)
    durations = {name: float(timings.action_durations_ms.get(name, 0.0)) for name in ALL_ACTIONS}
    return plan, timings.snapshot_build_ms, durations, dict(timings.counters)


def _stamp_creation(docs: Sequence[object], now: str) -> None:
    """Objects without metadata.creationTimestamp get `now`, as the apiserver stamps them on creation."""
    for doc in docs:
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        if isinstance(meta, dict) and not meta.get("creationTimestamp"):
            meta["creationTimestamp"] = now


def _materialize_groups(docs: list[dict], ingest: IngestResult, now: str) -> None:
    """Write the podgrouper's PodGroups and pod annotations/labels back into the documents."""
    present = {_kind_key(d) for d in docs}
    for key in sorted(ingest.generated_podgroups):
        manifest = ingest.generated_podgroups[key]
        if ("PodGroup", key) not in present:
            created = copy.deepcopy(manifest)
            _stamp_creation([created], now)
            docs.append(created)
    for doc in docs:
        if doc.get("kind") != "Pod":
            continue
        membership = ingest.pod_groups_of_pods.get(_key(doc))
        if membership is None:
            continue
        name, subgroup = membership
        if not name:  # skips the podgrouper and names no PodGroup: left as it is
            continue
        meta = _meta(doc)
        _submap(meta, "annotations")[POD_GROUP_ANNOTATION] = name
        if subgroup is not None:
            _submap(meta, "labels")[SUBGROUP_LABEL] = subgroup


def _apply(docs: list[dict], plan: Plan, cycle: int, now: str) -> list[dict]:
    pods = {_key(d): d for d in docs if d.get("kind") == "Pod"}
    groups = {_key(d): d for d in docs if d.get("kind") == "PodGroup"}
    removed: set[str] = set()
    added: list[dict] = []
    for op in plan.ops:
        if isinstance(op, Bind) and op.pod in pods:
            pod = pods[op.pod]
            pod.setdefault("spec", {})["nodeName"] = op.node
            status = pod.setdefault("status", {})
            status["phase"] = "Running"
            status.pop("nominatedNodeName", None)
            merge_patch(pod, {"metadata": bound_pod_metadata(op)})
        elif isinstance(op, Pipeline) and op.pod in pods:
            pods[op.pod].setdefault("status", {})["nominatedNodeName"] = op.node
        elif isinstance(op, Evict) and op.pod in pods and op.pod not in removed:
            removed.add(op.pod)
            pod = pods[op.pod]
            if any(isinstance(r, Mapping) and r.get("controller") for r in _meta(pod).get("ownerReferences") or ()):
                namespace, name = op.pod.split("/", 1)
                base = name.rsplit("-r", 1)[0] if mapping(pod, "metadata", "annotations").get("shoal.io/recreated") else name
                fresh = recreate_pod(pod, f"{base}-r{cycle}")
                fresh["metadata"]["creationTimestamp"] = now
                _submap(fresh["metadata"], "annotations")["shoal.io/recreated"] = "true"
                added.append(fresh)
        elif isinstance(op, Annotate) and op.pod_group in groups:
            merge_patch(groups[op.pod_group], annotation_patch(op))
        elif isinstance(op, SetCondition) and op.pod_group in groups:
            group = groups[op.pod_group]
            condition = next_condition(mapping(group, "status").get("schedulingConditions") or [], op, now)
            if condition is not None:
                merge_patch(group, condition_patch(condition))
        elif isinstance(op, SetCorePods) and op.pod_group in groups:
            merge_patch(groups[op.pod_group], core_pods_patch(op))
        elif isinstance(op, ClearCondition) and op.pod_group in groups:
            merge_patch(groups[op.pod_group], cleared_condition_patch(op))
    pipelined = {op.pod for op in plan.ops if isinstance(op, Pipeline)}
    for key, pod in pods.items():  # a pipeline lasts one cycle: the next cycle re-plans it
        if key not in pipelined and not (pod.get("spec") or {}).get("nodeName"):
            (pod.get("status") or {}).pop("nominatedNodeName", None)
    kept = [d for d in docs if not (d.get("kind") == "Pod" and _key(d) in removed)]
    return kept + added


def default_now(documents: Sequence[object]) -> str:
    """The latest metadata.creationTimestamp in the input (a replayed cluster's "now"), else DEFAULT_NOW."""
    latest = DEFAULT_NOW
    for doc in documents:
        meta = doc.get("metadata") if isinstance(doc, Mapping) else None
        stamp = meta.get("creationTimestamp") if isinstance(meta, Mapping) else None
        if not stamp:
            continue
        try:
            text = format_time(parse_time(stamp, "metadata.creationTimestamp"))
        except IngestError:
            continue  # reported by ingest
        latest = max(latest, text)
    return latest


def _prepare(documents: Sequence[Mapping], now: str | None) -> tuple[list, str, list[Problem]]:
    """The documents as the first cycle reads them (copied, workloads' pods made, creation stamped),
    the start time, and the workloads too large to expand."""
    docs = [copy.deepcopy(dict(d)) if isinstance(d, Mapping) else d for d in documents]
    where = [i for i, d in enumerate(docs) if isinstance(d, dict)]
    problems: list[Problem] = []
    docs = docs + expand_workloads([docs[i] for i in where], problems)
    problems = [dataclasses.replace(p, index=where[p.index]) for p in problems]
    current = now or default_now(docs)
    _stamp_creation(docs, current)
    return docs, current, problems


def first_snapshot(documents: Sequence[Mapping], now: str | None = None,
                   config_doc: Mapping | None = None) -> IngestResult:
    """The snapshot `simulate` schedules in its first cycle (for benchmarks that repeat that cycle)."""
    docs, current, problems = _prepare(documents, now)
    result = snapshot_from_objects(docs, now=current, revision=1, config_doc=config_doc)
    if problems:
        result = dataclasses.replace(result, problems=tuple(sorted([*result.problems, *problems])))
    return result


def simulate(documents: Sequence[Mapping], *, cycles: int = 1, now: str | None = None,
             config_doc: Mapping | None = None, timer: Timer | None = None) -> SimulationResult:
    """Run `cycles` cycles over `documents`; stops early (with problems) if the input is invalid."""
    clock = timer or (lambda: 0.0)
    docs, current, problems = _prepare(documents, now)
    result = SimulationResult()
    if problems:
        result.problems, result.documents = tuple(sorted(problems)), docs
        return result
    for cycle in range(1, cycles + 1):
        started = clock()
        ingest = snapshot_from_objects(docs, now=current, revision=cycle, config_doc=config_doc)
        built = clock()
        if ingest.problems:
            result.problems = ingest.problems
            result.documents = docs
            return result
        _materialize_groups(docs, ingest, current)
        plan, session_ms, actions, counters = _run_core(ingest.snapshot, clock)
        finished = clock()
        result.cycles.append(CycleRecord(cycle=cycle, plan=plan, snapshot_build_ms=(built - started) * 1000 + session_ms,
                                         total_duration_ms=(finished - started) * 1000, action_durations_ms=actions,
                                         counters=counters))
        docs = _apply(docs, plan, cycle, current)
        result.last = ingest
        current = add_seconds(current, ingest.settings.schedule_period_s)
    result.documents = docs
    return result

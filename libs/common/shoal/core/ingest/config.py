"""The `SchedulerConfig` document (apiVersion shoal.io/v1alpha1) → model.ShardConfig.

Schema (every field optional):

    apiVersion: shoal.io/v1alpha1
    kind: SchedulerConfig
    metadata: {name: default}          # the shard name
    spec:
      placementStrategy: {gpu: binpack|spread, cpu: binpack|spread}
      actions: [allocate, consolidation, reclaim, preempt, stalegangeviction]
               # or KAI style: {reclaim: {enabled: false}, ...}
      minRuntime: {preemptMinRuntime: 0s, reclaimMinRuntime: 0s}
      reclaimResolveMethod: lca|queue
      kValue: 1.0
      usage: {<queue>: {gpu: 0.5, cpu: 0, memory: 0}}     # historical usage, 0..1
      reservationNamespace: kai-resource-reservation
      defaultStalenessGracePeriod: 60s
      maxConsolidationPreemptees: 16
      victimBudget: 10000
      queueDepthPerAction: {reclaim: 100}
      stuckInReleasingThreshold: 2m
      schedulerNames: [shoal-scheduler, kai-scheduler]   # pods with these schedulerName are Shoal's
      partitionLabelValue: ""          # only nodes/pod groups/queues of this node pool ("" = all)
      schedulePeriod: 1s               # simulate: the clock advance per cycle
      reclaimerSaturationMultiplier: 1.0   # KAI's relcaimerSaturationMultiplier; values < 1 read as 1
      gpuSharingMode: NonMemoryEnforced    # KAI's gpuSharingMode: NonMemoryEnforced|HamiCore|NvFractions|Disabled
      bindBackoff: {initial: 5s, max: 5m}  # a job whose bind failed waits initial·2^(failures-1), capped

Following SchedulingShard, `consolidation` is dropped from the enabled actions when either
placement strategy is `spread`.

The services add what is theirs to set as a typed `Given` (never by editing the document): the usage history
(a queue the document's `spec.usage` lists wins: an operator's override), the shard pool's gpuSharingMode from
SHOAL_[POOL_]GPU_SHARING_MODE(S) (the document's `spec.gpuSharingMode` wins) and SHOAL_RESERVATION_NAMESPACE,
the one setting the binder and the node agent read too: a document naming another reservation namespace is
refused, so the planner cannot look for reservation pods where the binder does not put them.

    shard, settings = config_from(doc, Given(usage=queue_usage(history), reservation_namespace="gpu-reserve"))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shoal.core.ingest.common import IngestError, as_list, as_map, parse_duration
from shoal.core.ingest.quantity import QuantityError, parse_number
from shoal.core.model import ALL_ACTIONS, DEFAULT_RESERVATION_NAMESPACE, QueueUsage, ShardConfig
from shoal.core.sharing_mode import DEFAULT_MODE, mode_problem

API_VERSION = "shoal.io/v1alpha1"
KIND = "SchedulerConfig"
DEFAULT_SCHEDULER_NAMES = ("shoal-scheduler", "kai-scheduler")
STRATEGIES = ("binpack", "spread")
KNOWN_FIELDS = {
    "placementStrategy", "actions", "minRuntime", "reclaimResolveMethod", "kValue", "usage",
    "reservationNamespace", "defaultStalenessGracePeriod", "maxConsolidationPreemptees", "victimBudget",
    "queueDepthPerAction", "stuckInReleasingThreshold", "schedulerNames", "partitionLabelValue",
    "schedulePeriod", "reclaimerSaturationMultiplier", "gpuSharingMode", "bindBackoff",
}


@dataclass(frozen=True)
class Given:
    """What a service hands the config besides the document (see the module's docstring)."""

    usage: tuple[QueueUsage, ...] = ()  # the allocation history's figures (`shoal.core.usage.queue_usage`)
    sharing_mode: str | None = None  # the service setting for the shard's pool (None: the document's or default)
    reservation_namespace: str | None = None  # SHOAL_RESERVATION_NAMESPACE (None: the document's or default)


NOTHING_GIVEN = Given()


@dataclass(frozen=True)
class IngestSettings:
    """What ingest itself needs besides the core's ShardConfig."""

    scheduler_names: tuple[str, ...] = DEFAULT_SCHEDULER_NAMES
    partition: str = ""
    schedule_period_s: int = 1


def _number(value: object, field: str) -> float:
    try:
        return float(parse_number(value))
    except QuantityError as exc:
        raise IngestError(field, str(exc)) from None


def _positive_int(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise IngestError(field, "must be an integer >= 0")
    return value


def _actions(value: object) -> tuple[str, ...]:
    if isinstance(value, Mapping):
        enabled = []
        for name in ALL_ACTIONS:
            entry = value.get(name)
            on = True if entry is None else bool(as_map(entry, f"spec.actions.{name}").get("enabled", True))
            if on:
                enabled.append(name)
        unknown = sorted(set(value) - set(ALL_ACTIONS))
    else:
        names = [str(a) for a in as_list(value, "spec.actions")]
        unknown = sorted(set(names) - set(ALL_ACTIONS))
        enabled = [a for a in ALL_ACTIONS if a in names]
    if unknown:
        raise IngestError("spec.actions", f"unknown action(s) {', '.join(unknown)}; known: {', '.join(ALL_ACTIONS)}")
    return tuple(enabled)


def _usage(value: object) -> tuple[QueueUsage, ...]:
    out = []
    for queue, raw in sorted(as_map(value, "spec.usage").items()):
        data = as_map(raw, f"spec.usage.{queue}")
        figures = {}
        for resource in ("gpu", "cpu", "memory"):
            number = _number(data.get(resource, 0), f"spec.usage.{queue}.{resource}")
            if not 0 <= number <= 1:
                raise IngestError(f"spec.usage.{queue}.{resource}", "must be between 0 and 1")
            figures[resource] = number
        out.append(QueueUsage(queue=str(queue), **figures))
    return tuple(out)


def _reservation_namespace(spec: Mapping, given: Given) -> str:
    named = str(spec.get("reservationNamespace") or "")
    if given.reservation_namespace is None:
        return named or DEFAULT_RESERVATION_NAMESPACE
    if named and named != given.reservation_namespace:
        raise IngestError("spec.reservationNamespace", f"{named!r} differs from SHOAL_RESERVATION_NAMESPACE "
                          f"({given.reservation_namespace!r}), which the binder and node agent use: remove it")
    return given.reservation_namespace


def _with_given_usage(own: tuple[QueueUsage, ...], given: Given) -> tuple[QueueUsage, ...]:
    if not given.usage:
        return own
    merged = {u.queue: u for u in given.usage} | {u.queue: u for u in own}
    return tuple(merged[q] for q in sorted(merged))


def config_from(doc: Mapping | None, given: Given = NOTHING_GIVEN) -> tuple[ShardConfig, IngestSettings]:
    if doc is None:
        doc = {}
    if doc.get("apiVersion") not in (None, API_VERSION):
        raise IngestError("apiVersion", f"must be {API_VERSION}")
    spec = as_map(doc.get("spec"), "spec")
    unknown = sorted(set(spec) - KNOWN_FIELDS)
    if unknown:
        raise IngestError(f"spec.{unknown[0]}", "unknown field")
    placement = as_map(spec.get("placementStrategy"), "spec.placementStrategy")
    strategies = {}
    for key in ("gpu", "cpu"):
        value = str(placement.get(key) or "binpack")
        if value not in STRATEGIES:
            raise IngestError(f"spec.placementStrategy.{key}", "must be binpack or spread")
        strategies[key] = value
    actions = _actions(spec["actions"]) if spec.get("actions") is not None else ALL_ACTIONS
    if "spread" in strategies.values():
        actions = tuple(a for a in actions if a != "consolidation")
    min_runtime = as_map(spec.get("minRuntime"), "spec.minRuntime")
    method = str(spec.get("reclaimResolveMethod") or "lca")
    if method not in ("lca", "queue"):
        raise IngestError("spec.reclaimResolveMethod", "must be lca or queue")
    k_value = max(_number(spec["kValue"], "spec.kValue"), 0.0) if spec.get("kValue") is not None else 1.0
    depth = {str(k): _positive_int(v, f"spec.queueDepthPerAction.{k}")
             for k, v in as_map(spec.get("queueDepthPerAction"), "spec.queueDepthPerAction").items()}
    sharing_mode = str(spec.get("gpuSharingMode") or given.sharing_mode or DEFAULT_MODE)
    problem = mode_problem(sharing_mode, "gpuSharingMode")
    if problem:
        raise IngestError("spec.gpuSharingMode", problem.partition(": ")[2])
    meta = as_map(doc.get("metadata"), "metadata")
    backoff = as_map(spec.get("bindBackoff"), "spec.bindBackoff")
    backoff_initial = parse_duration(backoff.get("initial", "5s"), "spec.bindBackoff.initial")
    backoff_max = parse_duration(backoff.get("max", "5m"), "spec.bindBackoff.max")
    if backoff_initial < 0 or backoff_max < backoff_initial:
        raise IngestError("spec.bindBackoff", "initial must be >= 0s and max >= initial")
    shard = ShardConfig(
        name=str(meta.get("name") or "default"),
        gpu_placement=strategies["gpu"],
        cpu_placement=strategies["cpu"],
        actions=actions,
        reservation_namespace=_reservation_namespace(spec, given),
        k_value=k_value,
        usage=_with_given_usage(_usage(spec.get("usage")), given),
        preempt_min_runtime_s=parse_duration(min_runtime.get("preemptMinRuntime", 0), "spec.minRuntime.preemptMinRuntime"),
        reclaim_min_runtime_s=parse_duration(min_runtime.get("reclaimMinRuntime", 0), "spec.minRuntime.reclaimMinRuntime"),
        reclaim_resolve_method=method,
        default_staleness_grace_s=parse_duration(spec.get("defaultStalenessGracePeriod", "60s"),
                                                 "spec.defaultStalenessGracePeriod"),
        max_consolidation_preemptees=_positive_int(spec.get("maxConsolidationPreemptees", 16),
                                                   "spec.maxConsolidationPreemptees"),
        victim_budget=_positive_int(spec.get("victimBudget", 10_000), "spec.victimBudget"),
        victim_budget_per_job=_positive_int(spec.get("victimBudgetPerJob", 1_000), "spec.victimBudgetPerJob"),
        queue_depth_per_action=depth,
        stuck_in_releasing_s=parse_duration(spec.get("stuckInReleasingThreshold", "2m"), "spec.stuckInReleasingThreshold"),
        reclaimer_saturation_multiplier=max(_number(spec.get("reclaimerSaturationMultiplier", 1),
                                                    "spec.reclaimerSaturationMultiplier"), 1.0),
        gpu_sharing_mode=sharing_mode,
        bind_backoff_initial_s=backoff_initial,
        bind_backoff_max_s=backoff_max,
    )
    names = spec.get("schedulerNames")
    scheduler_names = tuple(str(n) for n in as_list(names, "spec.schedulerNames")) if names else DEFAULT_SCHEDULER_NAMES
    period = parse_duration(spec.get("schedulePeriod", "1s"), "spec.schedulePeriod")
    if period <= 0:
        raise IngestError("spec.schedulePeriod", "must be at least 1s")
    settings = IngestSettings(scheduler_names=scheduler_names, partition=str(spec.get("partitionLabelValue") or ""),
                              schedule_period_s=period)
    return shard, settings

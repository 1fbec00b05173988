"""Shoal's pure scheduling core: snapshot in, plan out (no I/O, no clock, no randomness).

Public API (imported lazily, so `import shoal.core.resources` stays light):

    from shoal.core import run_cycle, run_cycle_timed, make_snapshot, Snapshot, Plan
    plan = run_cycle(snapshot)                                   # -> Plan
    plan, timings = run_cycle_timed(snapshot, time.perf_counter)  # -> (Plan, CycleTimings)
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    # entry points
    "run_cycle": "shoal.core.cycle",
    "run_cycle_timed": "shoal.core.cycle",
    "ACTION_ORDER": "shoal.core.cycle",
    "ACTIONS": "shoal.core.cycle",
    # snapshot model
    "Snapshot": "shoal.core.model",
    "make_snapshot": "shoal.core.model",
    "Node": "shoal.core.model",
    "Pod": "shoal.core.model",
    "PodGroup": "shoal.core.model",
    "SubGroup": "shoal.core.model",
    "Queue": "shoal.core.model",
    "QueueResource": "shoal.core.model",
    "QueueUsage": "shoal.core.model",
    "PriorityClass": "shoal.core.model",
    "ShardConfig": "shoal.core.model",
    "FractionRequest": "shoal.core.model",
    "Taint": "shoal.core.model",
    "Toleration": "shoal.core.model",
    "NodeSelectorTerm": "shoal.core.model",
    "NodeSelectorRequirement": "shoal.core.model",
    # plan
    "Plan": "shoal.core.plan",
    "PlanOp": "shoal.core.plan",
    "Bind": "shoal.core.plan",
    "Pipeline": "shoal.core.plan",
    "Evict": "shoal.core.plan",
    "Reserve": "shoal.core.plan",
    "SetCondition": "shoal.core.plan",
    "ClearCondition": "shoal.core.plan",
    "ConditionReason": "shoal.core.plan",
    "QueueDetails": "shoal.core.plan",
    "PodGroupEvent": "shoal.core.plan",
    "PodEvent": "shoal.core.plan",
    "Annotate": "shoal.core.plan",
    "QueueFigures": "shoal.core.plan",
    "ResourceFigures": "shoal.core.plan",
    "CycleTimings": "shoal.core.plan",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'shoal.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

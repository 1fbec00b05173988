"""The invariants `shoal bench soak` checks (pure: plain manifests and numbers in, problems out).

    overcommitted(nodes, pods)               # ["node n1: GPUs 9 > 8", "gpu group g: fractions 1.25 > 1", ...]
    rebound(transitions)                     # pods seen on two nodes
    pending_without_reason(pods, groups)     # pending pods whose PodGroup carries no scheduling condition
    orphan_reservations(reservations, pods)  # reservation pods whose shared GPU holds no fractional pod
    flatness(series, warmup_s=60)            # {"flat": bool, "second_third": m2, "last_third": m3, ...}

Each returns what is wrong (an empty list when the invariant holds) so the report can name every violation.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from shoal.core.fields import items, mapping, value_at
from shoal.core.ingest.quantity import QuantityError, parse_quantity
from shoal.core.kai_labels import FRACTION, GPU_GROUP_LABEL
from shoal.devstack.bench_pods import GPU

RESOURCES = ("cpu", "memory", GPU)


def _qty(value: object) -> Fraction:
    try:
        return parse_quantity(value if value is not None else 0)
    except QuantityError:
        return Fraction(0)


def holds_resources(pod: Mapping[str, Any]) -> bool:
    """Bound and not finished: a pod with a deletionTimestamp still holds its node until it is gone."""
    return bool(value_at(pod, "spec", "nodeName")) and value_at(pod, "status", "phase") not in (
        "Succeeded", "Failed")


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """CPU, memory and GPUs a pod takes on its node (limits stand in for missing requests, as Kubernetes does)."""
    out: dict[str, Fraction] = defaultdict(Fraction)
    for container in items(pod, "spec", "containers"):
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        for name in RESOURCES:
            value = requests.get(name, limits.get(name))
            if value is not None:
                out[name] += _qty(value)
    return out


def _fraction(pod: Mapping[str, Any]) -> Fraction:
    return _qty(mapping(pod, "metadata", "annotations").get(FRACTION))


def overcommitted(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every node whose bound pods ask for more GPUs, CPU, memory or pod slots than it has, and every shared
    GPU (runai-gpu-group) whose fractions add up to more than one GPU or that holds no reservation pod."""
    used: dict[str, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    shares: dict[str, Fraction] = defaultdict(Fraction)
    reserved: dict[str, int] = defaultdict(int)
    for pod in pods:
        if not holds_resources(pod):
            continue
        node = pod["spec"]["nodeName"]
        for name, value in pod_requests(pod).items():
            used[node][name] += value
        used[node]["pods"] += 1
        group = mapping(pod, "metadata", "labels").get(GPU_GROUP_LABEL)
        if _fraction(pod):
            shares[group or f"(no group: {pod['metadata'].get('name')})"] += _fraction(pod)
        elif group:
            reserved[group] += 1  # the reservation pod of the shared GPU (it holds one whole GPU)
    problems = []
    for node in nodes:
        name = node["metadata"]["name"]
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        for resource in (*RESOURCES, "pods"):
            have, want = _qty(allocatable.get(resource, 0)), used[name].get(resource, Fraction(0))
            if want > have:
                problems.append(f"node {name}: {resource} {float(want):g} > {float(have):g} allocatable")
    for group, total in sorted(shares.items()):
        if total > 1:
            problems.append(f"shared GPU {group}: fractions add up to {float(total):g} > 1")
        if group not in reserved:
            problems.append(f"shared GPU {group}: fractional pods bound without a reservation pod")
    problems += [f"shared GPU {g}: {n} reservation pods" for g, n in sorted(reserved.items()) if n > 1]
    return problems


def rebound(transitions: Mapping[str, Sequence[str]]) -> list[str]:
    """Pods (by uid) seen bound to more than one node: `transitions` maps uid → distinct nodeNames in order."""
    return [f"pod {uid} bound to {' then '.join(nodes)}" for uid, nodes in sorted(transitions.items())
            if len(nodes) > 1]


def pending_without_reason(pods: Iterable[Mapping[str, Any]], groups: Iterable[Mapping[str, Any]]) -> list[str]:
    """Unbound, live pods whose PodGroup has no scheduling condition (Shoal says why a group waits there)."""
    reasons = {g["metadata"]["name"] for g in groups if (g.get("status") or {}).get("schedulingConditions")}
    out = []
    for pod in pods:
        meta = mapping(pod, "metadata")
        if value_at(pod, "spec", "nodeName") or meta.get("deletionTimestamp"):
            continue
        group = (meta.get("annotations") or {}).get("pod-group-name", "")
        if group not in reasons:
            out.append(f"pod {meta.get('name')} pending and its PodGroup {group or '(none)'} carries no condition")
    return out


def orphan_reservations(reservations: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
                        nodes: Iterable[str]) -> list[str]:
    """Reservation pods on `nodes` whose shared GPU holds no live fractional pod (deleting ones ignored)."""
    ours = set(nodes)
    groups = {mapping(p, "metadata", "labels").get(GPU_GROUP_LABEL) for p in pods
              if _fraction(p) and value_at(p, "spec", "nodeName") and not value_at(p, "metadata", "deletionTimestamp")}
    out = []
    for r in reservations:
        meta = mapping(r, "metadata")
        if value_at(r, "spec", "nodeName") not in ours or meta.get("deletionTimestamp"):
            continue
        group = (meta.get("labels") or {}).get(GPU_GROUP_LABEL)
        if group not in groups:
            out.append(f"reservation pod {meta.get('name')} (GPU group {group}) holds a GPU no fractional pod uses")
    return out


def flatness(series: Sequence[tuple[float, float]], *, warmup_s: float = 60.0, tolerance: float = 0.10,
             slack: float = 0.0, min_samples: int = 6) -> dict[str, Any]:
    """Whether a series of (t, value) stopped growing after `warmup_s`: the median of its last third is at most
    (1 + tolerance) × the median of its second third, plus `slack` (absolute). Too few samples: flat is None."""
    if not series:
        return {"flat": None, "samples": 0, "why": "no samples"}
    start = series[0][0] + warmup_s
    kept = [v for t, v in series if t >= start]
    if len(kept) < min_samples:
        return {"flat": None, "samples": len(kept), "why": f"{len(kept)} samples after warm-up (< {min_samples})"}
    third = len(kept) // 3
    second, last = kept[third: 2 * third], kept[2 * third:]
    m2, m3 = statistics.median(second), statistics.median(last)
    bound = m2 * (1 + tolerance) + slack
    return {"flat": m3 <= bound, "samples": len(kept), "second_third": round(m2, 1), "last_third": round(m3, 1),
            "bound": round(bound, 1), "growth_pct": round((m3 - m2) / m2 * 100, 1) if m2 else 0.0}


def longest_run(series: Sequence[tuple[float, float, int]]) -> list[tuple[float, float]]:
    """Of (t, value, incarnation) samples, the (t, value) of the incarnation sampled most often: a process
    restarted by a fault (or a Redis emptied by one) starts a new series, only the longest is judged."""
    runs: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for t, value, incarnation in series:
        runs[incarnation].append((t, value))
    return max(runs.values(), key=len, default=[])


def lag_problems(samples: Sequence[Mapping[str, int]], final: Mapping[str, int], *, bound: int,
                 final_bound: int) -> list[str]:
    """Consumer lag (messages, per group) at most `bound` in every sample and `final_bound` after the settle."""
    out = []
    worst: dict[str, int] = {}
    for sample in samples:
        for group, lag in sample.items():
            worst[group] = max(worst.get(group, 0), lag)
    out += [f"group {g}: lag reached {lag} > {bound}" for g, lag in sorted(worst.items()) if lag > bound]
    out += [f"group {g}: lag {lag} > {final_bound} after the settle" for g, lag in sorted(final.items())
            if lag > final_bound]
    return out

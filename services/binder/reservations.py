"""Which reservation pods to release (pure): a shared GPU's reservation pod lives while some pod of its
group is pending or running, or a bind into the group is still in flight; otherwise it is deleted with
grace 0 (KAI's binder sync, reference §5.3 "Lifecycle", scenario S34)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from shoal.core.fields import mapping
from shoal.core.kai_labels import gpu_groups_of

ACTIVE_PHASES = ("Pending", "Running", "")


def groups_of(pod: dict) -> set[str]:
    return set(gpu_groups_of(mapping(pod, "metadata", "labels")))


def active_groups(pods: Iterable[dict]) -> set[str]:
    out: set[str] = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase", "") in ACTIVE_PHASES:
            out |= groups_of(pod)
    return out


def _age_s(pod: dict, now: datetime) -> float:
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return 0.0
    return (now - datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds()


def stale_reservations(reservation_pods: Iterable[dict], shared_pods: Iterable[dict], inflight_groups: set[str],
                       now: datetime, grace_s: float = 30.0, *, check_groups: bool = True) -> list[dict]:
    """Reservation pods whose group has no active pod and no bind in flight, older than `grace_s`.
    `check_groups=False`: every one old enough, whatever uses its group (the candidates, before the pods
    using the groups are listed)."""
    keep = active_groups(shared_pods) | inflight_groups
    out = []
    for pod in reservation_pods:
        mine = groups_of(pod)
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        if mine and (not check_groups or not mine & keep) and _age_s(pod, now) >= grace_s:
            out.append(pod)
    return sorted(out, key=lambda p: p["metadata"]["name"])

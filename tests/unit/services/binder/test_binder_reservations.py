"""Reservation pods are released exactly when their shared GPU has no active pod and no bind in flight."""

from datetime import UTC, datetime, timedelta

from services.binder.reservations import active_groups, stale_reservations

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def pod(name, group=None, phase="Running", deleting=False, age_s=300, multi=()):
    labels = {"runai-gpu-group": group} if group else {}
    labels.update({f"runai-gpu-group/{g}": g for g in multi})
    meta = {"name": name, "labels": labels,
            "creationTimestamp": (NOW - timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T11:59:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_active_groups_ignore_finished_and_deleting_pods():
    pods = [pod("a", "g1"), pod("b", "g2", phase="Succeeded"), pod("c", "g3", deleting=True),
            pod("d", multi=("g4", "g5")), pod("e", "g6", phase="Pending")]
    assert active_groups(pods) == {"g1", "g4", "g5", "g6"}


def test_only_idle_old_reservations_are_released():
    reservations = [pod("r1", "g1"), pod("r2", "g2"), pod("r3", "g3"), pod("r4", "g4", age_s=5),
                    pod("r5", "g5", deleting=True)]
    shared = [pod("a", "g1"), pod("b", "g2", phase="Failed")]
    stale = stale_reservations(reservations, shared, inflight_groups={"g3"}, now=NOW, grace_s=30)
    assert [p["metadata"]["name"] for p in stale] == ["r2"]


def test_candidates_are_the_old_reservations_whatever_uses_their_groups():
    reservations = [pod("r1", "g1"), pod("r2", "g2", age_s=5), pod("r3", "g3", deleting=True), pod("r4")]
    shared = [pod("a", "g1")]
    candidates = stale_reservations(reservations, shared, inflight_groups={"g1"}, now=NOW, grace_s=30,
                                    check_groups=False)
    assert [p["metadata"]["name"] for p in candidates] == ["r1"]
    assert stale_reservations(reservations[1:], (), set(), NOW, 30, check_groups=False) == []

"""Stale gang eviction (reference §4.7; S5 and its variants) at the core level."""

from __future__ import annotations

from builders import NS, cluster, job, node, pod, queue, schedule

from shoal.core.model import ANNOTATION_STALE, Pod, ShardConfig, SubGroup
from shoal.core.plan import Annotate, Evict, PodGroupEvent

NOW = 1_000_000
STAMP = "1970-01-12T13:46:40Z"  # NOW as RFC3339


def gang(**kw):
    # minMember 2, one of the two pods was deleted: a single running pod is left
    return job("g", queue="q", pods=[pod("g-0", gpus=1, node_name="n1")], min_member=2, **kw)


def snap(spec, extra_pods=(), config=None, now=NOW):
    return cluster(nodes=[node("n1", gpus=4)], queues=[queue("q")], jobs=[spec], extra_pods=extra_pods,
                   config=config, now=now)


def stale_annotations(r):
    return [a for a in r.plan.of(Annotate) if a.key == ANNOTATION_STALE]


def test_s5_first_seen_stale_gets_the_timestamp_and_nothing_is_evicted():
    r = schedule(snap(gang()))
    assert r.plan.of(Evict) == []
    (ann,) = stale_annotations(r)
    assert (ann.pod_group, ann.value) == (f"{NS}/g", STAMP)


def test_s5_within_grace_nothing_happens():
    r = schedule(snap(gang(stale_timestamp="1970-01-12T13:46:00Z")))  # 40 s ago
    assert r.plan.of(Evict) == [] and stale_annotations(r) == []


def test_s5_after_grace_the_remaining_pod_is_evicted_with_event():
    r = schedule(snap(gang(stale_timestamp="1970-01-12T13:45:40Z")))  # 60 s ago
    (ev,) = r.plan.of(Evict)
    assert ev.pod == f"{NS}/g-0" and ev.action == "stalegangeviction" and ev.by == f"{NS}/g"
    assert ev.message == (
        f"Workload doesn't meet the minimum required number of pods (2), evicting remaining pod: {NS}/g-0"
    )
    (event,) = [e for e in r.pg_events("g") if e.reason == "StaleJob"]
    assert event.message == "Job is stale. 1 pods are active, minMember is 2"
    assert event.type == "Normal"


def test_s5_negative_grace_never_evicts():
    r = schedule(snap(gang(stale_timestamp="1970-01-01T00:00:00Z", staleness_grace_s=-1)))
    assert r.plan.of(Evict) == []


def test_shard_default_grace_applies():
    spec = gang(stale_timestamp="1970-01-12T13:45:40Z")
    assert schedule(snap(spec, config=ShardConfig(default_staleness_grace_s=300))).plan.of(Evict) == []


def test_s5_a_succeeded_pod_means_the_gang_is_completing():
    done = Pod(uid="uid-g-1", namespace=NS, name="g-1", pod_group="g", gpus=1, phase="Succeeded", node_name="n1")
    r = schedule(snap(gang(stale_timestamp="1970-01-01T00:00:00Z"), extra_pods=[done]))
    assert r.plan.of(Evict) == []
    (ann,) = stale_annotations(r)
    assert ann.value == ""  # not stale: the stamp is cleared


def test_recovered_gang_clears_the_timestamp():
    spec = job("g", queue="q", pods=2, gpus=1, min_member=2, running_on=["n1", "n1"],
               stale_timestamp="1970-01-01T00:00:00Z")
    r = schedule(snap(spec))
    (ann,) = stale_annotations(r)
    assert ann.value == ""
    assert r.plan.of(Evict) == []


def test_subgroup_variant_names_the_subgroup():
    subgroups = (SubGroup(name="a", min_member=1), SubGroup(name="b", min_member=2))
    pods = [pod("a-0", gpus=1, node_name="n1", subgroup="a"), pod("b-0", gpus=1, node_name="n1", subgroup="b")]
    spec = job("g", queue="q", pods=pods, min_member=0, subgroups=subgroups, stale_timestamp="1970-01-01T00:00:00Z")
    r = schedule(snap(spec))
    assert sorted(e.pod for e in r.plan.of(Evict)) == [f"{NS}/a-0", f"{NS}/b-0"]
    msg = next(e.message for e in r.plan.of(Evict) if e.pod == f"{NS}/b-0")
    assert msg == (
        f"Workload doesn't meet the minimum required number of pods (2) in sub-group b, "
        f"evicting remaining pod: {NS}/b-0"
    )
    (event,) = [e for e in r.plan.of(PodGroupEvent) if e.reason == "StaleJob"]
    assert event.message == "Job is stale. 2 pods are active, minMember is 0, subGroup b minMember is 2 and 1 pods are active"


def test_pending_gang_with_nothing_active_is_not_stale():
    spec = job("g", queue="q", pods=3, gpus=2, min_member=3)  # cannot fit on 4 GPUs
    r = schedule(snap(spec))
    assert stale_annotations(r) == [] and r.plan.of(Evict) == []


def test_a_gang_whose_missing_pod_waits_on_its_scheduling_gate_is_waiting_not_stale():
    # Grove recreates a lost pod gated (grove.io/podgang-pending-creation) until its PodGang is updated
    gated = pod("g-1", gpus=1, gated=True, gates=("grove.io/podgang-pending-creation",))
    spec = job("g", queue="q", pods=[pod("g-0", gpus=1, node_name="n1"), gated], min_member=2,
               stale_timestamp="1970-01-12T13:40:00Z")
    r = schedule(snap(spec))
    assert r.plan.of(Evict) == []
    assert [(a.pod_group, a.value) for a in stale_annotations(r)] == [(f"{NS}/g", "")], "the stale stamp is cleared"
    (event,) = [e for e in r.pg_events("g") if e.reason == "NotReady"]
    assert event.message == ("Job is not ready for scheduling. Waiting for 2 pods, currently 2 exist, 1 are gated. "
                             "Gated pods wait until their scheduling gates are removed: "
                             "grove.io/podgang-pending-creation")

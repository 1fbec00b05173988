"""Pure parts of `shoal bench soak`: the invariants it checks (over-commitment, pods bound twice, pending pods
without a reason, orphaned reservation pods, flat series, bounded lag), the fault plan, the job stream and its
manifests, the pod tracker's bookkeeping and the argument checks."""

from __future__ import annotations

import argparse
import random

from shoal.adapters.kube_watch import WatchEvent
from shoal.cli.bench_soak import run_soak
from shoal.devstack.soak_checks import (
    flatness,
    lag_problems,
    longest_run,
    orphan_reservations,
    overcommitted,
    pending_without_reason,
    rebound,
)
from shoal.devstack.soak_faults import FAULTS, plan_faults
from shoal.devstack.soak_jobs import JobGen, job_manifests, queue_manifests
from shoal.devstack.soak_watch import PodTracker


def node(name, gpus=8, cpu="32", memory="128Gi", pods=40):
    return {"metadata": {"name": name},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": memory, "pods": str(pods)}}}


def pod(name, node_name=None, *, gpus=0, cpu="1", memory="1Gi", fraction=None, group=None, phase="Running",
        deleting=False, namespace="ns"):
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    meta = {"name": name, "namespace": namespace, "uid": f"u-{name}", "annotations": {}, "labels": {}}
    if fraction:
        meta["annotations"]["gpu-fraction"] = fraction
    if group:
        meta["labels"]["runai-gpu-group"] = group
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    spec = {"containers": [{"name": "c", "resources": {"limits": limits, "requests": {"cpu": cpu, "memory": memory}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_a_node_within_its_allocatable_is_not_overcommitted():
    pods = [pod("a", "n1", gpus=4), pod("b", "n1", gpus=3), pod("r", "n1", gpus=1, group="g1"),
            pod("f1", "n1", fraction="0.5", group="g1"), pod("f2", "n1", fraction="0.5", group="g1"),
            pod("pending", gpus=8)]
    assert overcommitted([node("n1")], pods) == []


def test_gpus_cpu_memory_and_pod_slots_over_allocatable_are_each_named():
    pods = [pod("a", "n1", gpus=6, cpu="20", memory="100Gi"), pod("b", "n1", gpus=3, cpu="13", memory="29Gi")]
    problems = overcommitted([node("n1", pods=1)], pods)
    assert problems == ["node n1: cpu 33 > 32 allocatable", f"node n1: memory {129 * 2**30:g} > {128 * 2**30:g} allocatable",
                        "node n1: nvidia.com/gpu 9 > 8 allocatable", "node n1: pods 2 > 1 allocatable"]


def test_a_terminating_pod_still_holds_its_node_and_a_finished_one_does_not():
    pods = [pod("old", "n1", gpus=8, deleting=True), pod("new", "n1", gpus=1)]
    assert overcommitted([node("n1")], pods) == ["node n1: nvidia.com/gpu 9 > 8 allocatable"]
    pods[0]["status"]["phase"] = "Succeeded"
    assert overcommitted([node("n1")], pods) == []


def test_a_shared_gpu_over_one_or_without_its_reservation_pod_or_with_two_is_named():
    pods = [pod("r", "n1", gpus=1, group="g1"), pod("f1", "n1", fraction="0.5", group="g1"),
            pod("f2", "n1", fraction="0.75", group="g1"), pod("f3", "n1", fraction="0.25", group="g2"),
            pod("r3", "n1", gpus=1, group="g3"), pod("r3b", "n1", gpus=1, group="g3")]
    assert overcommitted([node("n1")], pods) == ["shared GPU g1: fractions add up to 1.25 > 1",
                                                 "shared GPU g2: fractional pods bound without a reservation pod",
                                                 "shared GPU g3: 2 reservation pods"]


def test_a_pod_seen_on_two_nodes_is_bound_twice():
    assert rebound({"u1": ["n1"], "u2": ["n1", "n2"]}) == ["pod u2 bound to n1 then n2"]


def test_pending_pods_need_a_condition_on_their_podgroup():
    pods = [pod("a"), pod("b"), pod("c", "n1"), pod("d", deleting=True)]
    for p, g in zip(pods, ("ga", "gb", "gc", "gd"), strict=True):
        p["metadata"]["annotations"]["pod-group-name"] = g
    groups = [{"metadata": {"name": "ga"}, "status": {"schedulingConditions": [{"reasons": [{"reason": "x"}]}]}},
              {"metadata": {"name": "gb"}, "status": {}}]
    assert pending_without_reason(pods, groups) == ["pod b pending and its PodGroup gb carries no condition"]


def test_a_reservation_pod_whose_gpu_holds_no_live_fraction_is_orphaned():
    reservations = [pod("r1", "n1", gpus=1, group="g1", namespace="kai-resource-reservation"),
                    pod("r2", "n1", gpus=1, group="g2", namespace="kai-resource-reservation"),
                    pod("r3", "other", gpus=1, group="g3", namespace="kai-resource-reservation")]
    pods = [pod("f1", "n1", fraction="0.5", group="g1"), pod("f2", "n1", fraction="0.5", group="g2", deleting=True)]
    assert orphan_reservations(reservations, pods, ["n1"]) == [
        "reservation pod r2 (GPU group g2) holds a GPU no fractional pod uses"]


def test_flatness_compares_the_last_third_with_the_second_after_the_warmup():
    steady = [(t * 10.0, 100.0 + (t % 3)) for t in range(40)]
    verdict = flatness(steady, warmup_s=60, tolerance=0.1)
    assert verdict["flat"] is True and verdict["samples"] == 34
    growing = [(t * 10.0, 100.0 + 5 * t) for t in range(40)]
    assert flatness(growing, warmup_s=60, tolerance=0.1)["flat"] is False
    assert flatness(growing[:8], warmup_s=60)["flat"] is None  # too few samples after the warm-up


def test_only_the_longest_incarnation_is_judged():
    points = [(0, 50, 1), (10, 60, 1), (20, 5, 2), (30, 6, 2), (40, 7, 2)]
    assert longest_run(points) == [(20, 5), (30, 6), (40, 7)]


def test_lag_over_the_bound_while_running_or_after_the_settle_is_named():
    samples = [{"p.binder": 3, "p.planner": 2000}, {"p.binder": 10}]
    assert lag_problems(samples, {"p.binder": 60}, bound=1000, final_bound=50) == [
        "group p.planner: lag reached 2000 > 1000", "group p.binder: lag 60 > 50 after the settle"]


def test_faults_come_in_rotation_and_none_in_the_quiet_tail():
    assert plan_faults(FAULTS, 600, 120, first_s=60, quiet_tail_s=60) == [
        (60, "kill"), (180, "kafka"), (300, "redis"), (420, "apiserver"), (540, "kill")]
    assert plan_faults(FAULTS, 600, 0, first_s=60, quiet_tail_s=60) == []


def test_the_job_stream_mixes_every_kind_queue_and_priority_and_is_seeded():
    gen = JobGen(random.Random(3), ["qa", "qb", "qc"], "pool", wave_s=100)
    jobs = [gen.next(float(i)) for i in range(300)]
    assert {j.kind for j in jobs} == {"gang", "elastic", "whole", "fraction"}
    assert {j.priority for j in jobs} == {"train", "build"}
    assert all(j.min_member == 2 and len(j.pods) == 4 for j in jobs if j.kind == "elastic")
    assert all(j.min_member == len(j.pods) for j in jobs if j.kind == "gang")
    first_wave = [j.queue for j in jobs[:100]]
    assert first_wave.count("qa") > first_wave.count("qb")  # the wave's busy queue gets most jobs
    again = JobGen(random.Random(3), ["qa", "qb", "qc"], "pool", wave_s=100)
    assert [again.next(float(i)).name for i in range(300)] == [j.name for j in jobs]


def test_job_manifests_are_a_podgroup_then_pods_naming_it():
    gen = JobGen(random.Random(1), ["qa"], "pool")
    job = next(j for j in (gen.next(0) for _ in range(50)) if j.kind == "fraction")
    group, fractional = job_manifests(job, "ns", "pool")
    assert group["kind"] == "PodGroup" and group["spec"]["minMember"] == 1 and group["spec"]["queue"] == "qa"
    assert fractional["metadata"]["annotations"]["pod-group-name"] == job.name
    assert fractional["metadata"]["annotations"]["gpu-fraction"] in ("0.5", "0.25")
    assert "limits" not in fractional["spec"]["containers"][0]["resources"]
    parent, leaf = queue_manifests("root", ["qa"], 16)
    assert leaf["spec"]["parentQueue"] == "root" and leaf["spec"]["resources"]["gpu"]["quota"] == 16


def test_the_tracker_records_node_transitions_and_pods_gone_from_a_relist():
    tracker = PodTracker(kube=None, namespace="ns")  # type: ignore[arg-type]
    tracker.apply(WatchEvent(type="SYNCED", objects=[pod("a"), pod("b", "n1")], reason="initial"))
    tracker.apply(WatchEvent(type="MODIFIED", object=pod("a", "n2")))
    tracker.apply(WatchEvent(type="MODIFIED", object=pod("a", "n3")))
    assert tracker.nodes_by_uid == {"u-b": ["n1"], "u-a": ["n2", "n3"]}
    assert set(tracker.bound_at) == {"a", "b"}
    tracker.apply(WatchEvent(type="SYNCED", objects=[pod("a", "n3")], reason="expired"))
    assert tracker.gone == {"b"} and set(tracker.live) == {"a"} and tracker.relists == 1
    tracker.apply(WatchEvent(type="DELETED", object=pod("a", "n3")))
    assert tracker.gone == {"a", "b"} and not tracker.live


def test_bad_arguments_exit_2_with_one_line_each(capsys):
    args = argparse.Namespace(minutes=0, fault_every=10, faults="kill,oops", jobs_per_s=1, sample_every=15,
                              seed=7, nodes=0, json=False)
    assert run_soak(args) == 2
    assert capsys.readouterr().err.splitlines() == [
        "--faults: unknown 'oops' (choose from kill, kafka, redis, apiserver)", "--minutes: must be above 0",
        "--fault-every: must be 0 (none) or at least 30"]


def test_rss_is_read_from_proc_and_zero_for_a_process_gone():
    import os

    from shoal.devstack.soak_sample import rss_mb

    assert rss_mb(os.getpid()) > 1.0
    assert rss_mb(2**22 + 1) == 0.0  # above the kernel's pid_max: no such process

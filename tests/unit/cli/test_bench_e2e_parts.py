"""Pure parts of `shoal bench e2e`: percentiles and medians, the alternating order, the pod mix and its manifests,
the kube-scheduler configuration, CPU seconds from /proc, the watcher's file and the table."""

from __future__ import annotations

import json
import os
from collections import Counter

import yaml

from shoal.devstack.bench_contenders import cpu_seconds, kube_scheduler_config, shoal_env
from shoal.devstack.bench_pods import gpus_needed, nodes_needed, pod_manifest, pod_mix, podgroup_manifest
from shoal.devstack.bench_stats import (
    alternate,
    figures_by_kind,
    latency_figures,
    median,
    percentile,
    ready_latencies,
    summarise,
    table,
)
from shoal.devstack.bench_watcher import BoundLog
from shoal.devstack.benche2e import BIND_CEILING, KAI_CEILING, plan


def test_percentile_is_nearest_rank_and_zero_for_no_values():
    values = list(range(1, 101))  # 1..100
    assert percentile(values, 0.5) == 51 and percentile(values, 0.99) == 99 and percentile(values, 1.0) == 100
    assert percentile([], 0.5) == 0.0 and percentile([7.0], 0.99) == 7.0
    assert median([3, 1, 2]) == 2 and median([1, 2, 3, 4]) == 2.5 and median([]) == 0.0
    assert latency_figures([10.0, 20.0, 30.0]) == {"p50_ms": 20.0, "p90_ms": 30.0, "p99_ms": 30.0, "max_ms": 30.0}


def test_figures_by_kind_split_the_mix_and_skip_pods_never_bound():
    plans = pod_mix(20, "s")
    kinds = {p.name: p.kind for p in plans}
    latencies = {p.name: {"gang": 300.0, "whole": 50.0, "fraction": 120.0}[p.kind] for p in plans}
    latencies.pop(next(n for n, k in kinds.items() if k == "whole"))
    figures = figures_by_kind(plans, latencies)
    assert figures == {"fraction_p50_ms": 120.0, "fraction_p99_ms": 120.0, "gang_p50_ms": 300.0,
                       "gang_p99_ms": 300.0, "whole_p50_ms": 50.0, "whole_p99_ms": 50.0}
    assert figures_by_kind(plans, {}) == {}


def test_a_gang_member_is_ready_when_its_gangs_last_member_is_created_other_pods_when_they_are():
    plans = pod_mix(10, "s")  # s-0..s-3 a gang of four, s-4..s-6 whole, s-7..s-9 fractions
    created = {p.name: float(i) for i, p in enumerate(plans)}  # one a second: the gang is whole at 3.0
    bound = {p.name: 3.5 if p.kind == "gang" else created[p.name] + 0.25 for p in plans}
    del bound["s-9"]  # never bound: not counted
    ready = ready_latencies(plans, created, bound)
    assert {n: ready[n] for n in ("s-0", "s-1", "s-2", "s-3")} == dict.fromkeys(("s-0", "s-1", "s-2", "s-3"), 500.0)
    assert ready["s-4"] == ready["s-8"] == 250.0 and "s-9" not in ready
    assert ready_latencies(plans, created, {}) == {}
    no_gangs = [p for p in plans if p.kind != "gang"]  # plans that name no gang: create → bound for every pod
    assert ready_latencies(no_gangs, created, bound) == {n: (bound[n] - created[n]) * 1000 for n in bound}


def test_alternation_changes_who_leads_and_who_follows_whom():
    names = ["a", "b", "c"]
    orders = [alternate(names, r) for r in range(6)]
    assert orders[:4] == [["a", "b", "c"], ["c", "b", "a"], ["b", "c", "a"], ["a", "c", "b"]]
    assert {o[0] for o in orders} == set(names)  # each leads
    follows = Counter((o[i], o[i + 1]) for o in orders for i in range(2))
    assert follows[("a", "b")] and follows[("b", "a")]  # a pair meets in both orders
    assert all(sorted(o) == names for o in orders) and alternate([], 3) == []


def test_the_run_plan_alternates_backlog_and_steady_phases_with_the_bind_ceiling_in_the_backlog_rotation():
    phases = plan(["shoal", "kube-scheduler"], [10, 50], repeat=2)
    first = [(kind, s, r) for rep, kind, s, r in phases if rep == 0]
    assert first == [("backlog", "shoal", 0.0), ("backlog", "kube-scheduler", 0.0), ("bind-ceiling", BIND_CEILING, 0.0),
                     ("kai-writes", KAI_CEILING, 0.0), ("steady", "shoal", 10.0), ("steady", "kube-scheduler", 10.0),
                     ("steady", "shoal", 50.0), ("steady", "kube-scheduler", 50.0)]
    second = [s for rep, kind, s, _ in phases if rep == 1 and kind == "steady"]
    assert second[:2] == ["kube-scheduler", "shoal"]
    assert not [p for p in plan(["shoal"], [5], 1, bind_ceiling=False) if p[1] in ("bind-ceiling", "kai-writes")]


def test_the_mix_has_gangs_whole_gpus_and_fractions_and_a_cut_short_gang_keeps_its_real_size():
    mix = pod_mix(30, "b")
    assert [p.name for p in mix] == [f"b-{i}" for i in range(30)]
    assert Counter(p.kind for p in mix) == {"gang": 12, "whole": 9, "fraction": 9}
    gangs = Counter(p.group for p in mix if p.kind == "gang")
    assert set(gangs.values()) == {4} and all(p.group_size == 4 for p in mix if p.group)
    assert sum(p.first_of_group for p in mix) == 3
    short = pod_mix(12, "x")  # ten, then a gang of two
    assert [(p.kind, p.group_size) for p in short[10:]] == [("gang", 2), ("gang", 2)]
    assert gpus_needed(mix) == 12 + 9 + 5 and nodes_needed(mix) == 5  # 26 GPUs x 1.25 / 8 → 5 nodes


def test_shoal_pods_name_their_gang_and_fraction_and_kube_scheduler_gets_the_plain_equivalent():
    gang, whole, fraction = pod_mix(10, "p")[0], pod_mix(10, "p")[4], pod_mix(10, "p")[7]
    g = pod_manifest(gang, "ns", "pool", "shoal")
    assert g["metadata"]["annotations"] == {"pod-group-name": "p-g0"} and g["spec"]["schedulerName"] == "shoal-scheduler"
    assert g["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    f = pod_manifest(fraction, "ns", "pool", "shoal")
    assert f["metadata"]["annotations"] == {"gpu-fraction": "0.5"} and f["spec"]["containers"][0]["resources"] == {}
    for plan_ in (gang, whole, fraction):
        plain = pod_manifest(plan_, "ns", "pool", "plain")
        assert plain["metadata"]["annotations"] == {} and plain["spec"]["schedulerName"] == "default-scheduler"
        assert plain["spec"]["nodeSelector"] == {"kai.scheduler/node-pool": "pool"}
    assert pod_manifest(fraction, "ns", "pool", "plain")["spec"]["containers"][0]["resources"] == {}
    assert pod_manifest(gang, "ns", "pool", "unscheduled")["spec"]["schedulerName"] == "no-scheduler"
    assert podgroup_manifest("ns", "p-g0", 4, "ns")["spec"] == {"minMember": 4, "queue": "ns", "priorityClassName": "train"}


def test_the_equal_limits_kube_scheduler_configuration_and_shoals_phase_environment():
    doc = yaml.safe_load(kube_scheduler_config("/k/config", 5000))
    assert doc["kind"] == "KubeSchedulerConfiguration" and doc["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert doc["clientConnection"] == {"kubeconfig": "/k/config", "qps": 5000, "burst": 5000}
    assert doc["leaderElection"] == {"leaderElect": False}
    env = shoal_env({"SHOAL_KUBECONFIG": "/k"}, "bep1", "bep1-pool")
    assert env["SHOAL_TOPIC_PREFIX"] == "bep1." and env["SHOAL_SHARD_PREFIX"] == "bep1-pool"
    assert env["SHOAL_FAKE_NODE_SELECTOR"] == "shoal.io/isolated=bep1"


def test_cpu_seconds_of_a_live_process_grow_with_work_and_a_gone_one_is_zero():
    before = cpu_seconds(os.getpid())
    total = 0
    for i in range(3_000_000):
        total += i * i
    assert total > 0 and cpu_seconds(os.getpid()) > before >= 0
    assert cpu_seconds(2**22 + 12345) == 0.0  # above pid_max: never a live process


def test_the_watchers_file_is_read_incrementally_even_across_a_half_written_line(tmp_path):
    path = tmp_path / "w.jsonl"
    log = BoundLog(path)
    assert log.poll() == 0 and not log.is_ready()
    line = json.dumps({"pod": "a", "bound": 2.0, "node": "n"})
    path.write_text(json.dumps({"ready": 1.0}) + "\n" + line[:10])
    assert log.is_ready() and log.ready_at == 1.0 and log.poll() == 0
    with open(path, "a") as handle:
        handle.write(line[10:] + "\n" + json.dumps({"pod": "a", "bound": 9.0, "node": "n"}) + "\n")
    assert log.poll() == 1 and log.bound == {"a": 2.0}  # the first sighting counts


async def test_the_watchers_file_says_when_each_podgroup_was_first_seen_and_the_bench_waits_for_them(tmp_path):
    from shoal.devstack.bench_phases import groups_settled

    path = tmp_path / "w.jsonl"
    log = BoundLog(path)
    plans = pod_mix(10, "s")  # a gang (one PodGroup) and six bare pods (one each): seven
    lines = [{"ready": 1.0}, *({"pod": p.name, "bound": 5.0, "node": "n"} for p in plans),
             *({"group": f"g{i}", "at": 3.0 + i} for i in range(7)), {"group": "g0", "at": 99.0}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert await groups_settled(log, plans, "shoal", timeout_s=1) == {"groups_settled_s": 4.0}
    assert log.groups["g0"] == 3.0  # the first sighting counts
    assert await groups_settled(log, plans, "plain", timeout_s=1) == {}
    assert await groups_settled(log, pod_mix(20, "s"), "shoal", timeout_s=0.2) == {"groups_settled_s": -1.0}


def _record(scheduler, rep, p50, kind="steady", rate=10.0):
    return {"kind": kind, "scheduler": scheduler, "rate": rate, "pods": 30, "bound": 30, "repetition": rep,
            "figures": {"p50_ms": p50}, "cpu_s": {"x": p50 / 10}, "load_before": [1.0 + rep, 0, 0],
            "load_after": [1, 0, 0]}


def test_summary_takes_medians_per_phase_and_the_table_shows_them():
    records = [_record("shoal", r, p) for r, p in enumerate((30.0, 10.0, 20.0))] + [_record("kube-scheduler", 0, 5.0)]
    rows = summarise(records)
    assert [(r["scheduler"], r["repetitions"], r["figures"]["p50_ms"]) for r in rows] == [
        ("shoal", 3, 20.0), ("kube-scheduler", 1, 5.0)]
    assert rows[0]["load_average"] == 2.0 and rows[0]["cpu_s"] == {"x": 2.0}
    result = {"summary": rows, "pods": 30, "rates": [10.0], "duration_s": 3, "repeat": 3,
              "load_average": {"before": [1, 1, 1], "after": [2, 2, 2]}}
    text = table(result)
    assert "steady" in text and "shoal" in text and "20.0" in text and "cpu s steady shoal @10.0: x=2.0" in text
    assert "backlog" not in text.split("\n", 1)[1]  # no backlog block without backlog rows


def test_the_kai_writes_ceiling_makes_per_pod_the_writes_kais_model_asks_of_a_scheduler():
    from shoal.devstack.bench_kai_writes import pod_writes, reservation_writes, stamp_write

    def shape(writes):
        return [(w.verb, w.resource.plural, w.subresource) for w in writes]

    gang, whole, fraction = (next(p for p in pod_mix(10, "w") if p.kind == kind)
                             for kind in ("gang", "whole", "fraction"))
    tail = [("create", "pods", "binding"), ("create", "events", None)]
    assert shape(pod_writes(gang, "ns", node="n1", uid="u", gpu_group=None)) == tail  # its PodGroup exists
    own_group = pod_writes(whole, "ns", node="n1", uid="u", gpu_group=None)
    assert shape(own_group) == [("create", "podgroups", None), *tail]
    assert own_group[0].body["metadata"]["ownerReferences"][0]["uid"] == "u"  # the podgrouper's, owned by its pod
    assert own_group[1].body["target"]["name"] == "n1"
    assert shape(pod_writes(fraction, "ns", node="n1", uid="u", gpu_group="g0")) == [
        ("create", "podgroups", None), ("create", "configmaps", None), ("create", "configmaps", None),
        ("patch", "pods", None), *tail]
    assert shape(reservation_writes("n1", "g0")) == [("create", "pods", None), ("patch", "pods", None)]
    assert reservation_writes("n1", "g0")[0].body["spec"]["nodeName"] == "n1"
    assert shape([stamp_write("ns", "w-g0")]) == [("patch", "podgroups", None)]


async def test_the_kai_writer_reserves_each_shared_gpu_once_for_its_two_halves_and_stamps_each_gang_once():
    from shoal.devstack.bench_kai_writes import KaiWriter

    sent: list[tuple[str, str, str | None]] = []

    class Kube:
        async def create(self, resource, body, *, namespace=None, name=None, subresource=None, answer=True):
            assert (name is None) == (subresource is None)  # a name makes the path a subresource's
            sent.append(("create", resource.plural, subresource))

        async def patch(self, resource, name, body, *, namespace=None, answer=True):
            sent.append(("patch", resource.plural, name))

    plans = pod_mix(20, "w")
    posted: list[float] = []
    writer = KaiWriter(Kube(), "ns", ["n0", "n1"], {p.name: f"u-{p.name}" for p in plans}, posted)  # type: ignore[arg-type]
    for job in writer.jobs(plans):
        await job()
    counts = Counter((verb, plural) for verb, plural, _ in sent)
    assert len(posted) == 20 and counts[("create", "events")] == 20
    assert counts[("create", "podgroups")] == 12  # the bare pods' (6 per 10)
    assert counts[("create", "configmaps")] == 12 and counts[("patch", "pods")] == 6 + 3  # 6 fractions, 3 GPU ids
    assert sum(1 for verb, plural, sub in sent if (verb, plural, sub) == ("create", "pods", None)) == 3  # 3 GPUs
    assert sorted(name for verb, plural, name in sent if plural == "podgroups" and verb == "patch") == ["w-g0", "w-g1"]

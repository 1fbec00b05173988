"""`shoal bench e2e`, correctness only, at tiny sizes: every phase (backlog for each scheduler, the bind ceiling,
the KAI-writes ceiling, steady arrival for each scheduler) binds every pod and reports its figures, and nothing is left behind
(namespaces, queues, nodes, processes). No timing is asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.adapters.kube import NAMESPACES, NODES, QUEUES
from shoal.devstack.bench_contenders import STACK_COMPONENTS
from shoal.devstack.bench_pods import BENCH_LABEL
from shoal.devstack.bench_stats import COLUMNS
from shoal.devstack.benche2e import SCHEDULERS, SHOAL_SERVICES, run, table
from shoal.devstack.procs import pid_file

BACKLOG = 30
RATE = 5
DURATION_S = 3


@pytest.mark.timeout(900)
async def test_tiny_e2e_benchmark_binds_every_pod_in_every_phase_and_leaves_nothing(stack, kube):
    result = await run(stack, pods=BACKLOG, rates=(RATE,), duration_s=DURATION_S, repeat=1, timeout_s=240)

    kinds = [(r["kind"], r["scheduler"]) for r in result["records"]]
    assert sorted(kinds) == sorted([("backlog", s) for s in SCHEDULERS] + [("bind-ceiling", "apiserver-bind")]
                                   + [("kai-writes", "apiserver-kai-writes")] + [("steady", s) for s in SCHEDULERS])
    for record in result["records"]:
        expected = BACKLOG if record["kind"] != "steady" else RATE * DURATION_S
        assert record["pods"] == expected and record["bound"] == expected, record
        assert set(COLUMNS[record["kind"]]) <= set(record["figures"]), record
        assert all(value >= 0 for value in record["figures"].values()), record
        assert len(record["load_before"]) == 3 and "bench-watcher" in record["cpu_s"]
        # the stack's servers, Shoal's Kafka and Redis among them, when its pid files are there to read
        assert {name for name in STACK_COMPONENTS if stack.state_dir and
                pid_file(Path(stack.state_dir), name).exists()} <= set(record["cpu_s"]), record
        if record["scheduler"] == "shoal":
            assert {f"shoal-{s}" for s in SHOAL_SERVICES} <= set(record["cpu_s"])
            # every pod's PodGroup exists before the phase is measured (a bare pod's may follow its bind)
            assert record["figures"]["groups_settled_s"] >= 0, record
        elif record["kind"] not in ("bind-ceiling", "kai-writes"):
            assert record["scheduler"] in record["cpu_s"]
    backlog = {r["scheduler"]: r["figures"] for r in result["records"] if r["kind"] == "backlog"}
    assert all(f["startup_s"] > 0 and f["drain_from_launch_pods_per_s"] > 0 for f in backlog.values())
    assert [r["scheduler"] for r in result["summary"] if r["kind"] == "steady"] == list(SCHEDULERS)

    assert result["leftovers"] == []
    selector = f"{BENCH_LABEL}={result['run_tag']}"
    assert (await kube.list(NAMESPACES, label_selector=selector))[0] == []
    assert (await kube.list(NODES, label_selector=selector))[0] == []
    queues, _ = await kube.list(QUEUES)
    assert not [q for q in queues if q["metadata"]["name"].startswith(result["run_tag"])]
    assert list((Path(result["state_dir"]) / "pids").glob("*.pid")) == []  # every process stopped by its pid

    text = table(result)
    assert all(kind in text for kind in COLUMNS) and "load average" in text

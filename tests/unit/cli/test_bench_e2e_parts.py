"""Pure parts of `shoal bench e2e`: CPU seconds from /proc, the pre-grouped pods, the table's CPU rows."""

from __future__ import annotations

import os

from shoal.devstack.benche2e import _cpu_seconds, _pod, _podgroup, table


def test_cpu_seconds_of_a_live_process_grow_with_work_and_a_gone_one_is_zero():
    before = _cpu_seconds(os.getpid())
    total = 0
    for i in range(3_000_000):
        total += i * i
    after = _cpu_seconds(os.getpid())
    assert total > 0 and after > before >= 0
    assert _cpu_seconds(2**22 + 12345) == 0.0  # above pid_max: never a live process


def test_a_pregrouped_pod_names_its_podgroup_and_a_bare_one_does_not():
    grouped = _pod("ns", "shoal-pregrouped-1", "pool", "shoal-scheduler", "shoal-pregrouped-1")
    assert grouped["metadata"]["annotations"] == {"pod-group-name": "shoal-pregrouped-1"}
    assert _pod("ns", "shoal-1", "pool", "shoal-scheduler")["metadata"]["annotations"] == {}
    group = _podgroup("ns", "shoal-pregrouped-1", "ns")
    assert group["kind"] == "PodGroup" and group["spec"]["minMember"] == 1 and group["spec"]["queue"] == "ns"


def test_table_lists_cpu_seconds_for_the_shoal_phases_only():
    phase = {"pods": 2, "seconds": 1.0, "pods_per_second": 2.0, "p50_ms": 1.0, "p99_ms": 2.0}
    result = {"phases": [{**phase, "name": "raw", "cpu_s": None},
                         {**phase, "name": "shoal", "cpu_s": {"shoal-binder": 1.5, "shoal-planner": 0.25}}],
              "ratios": {"shoal_vs_apiserver_bind_limit": 1.0}}
    text = table(result)
    assert "cpu seconds during shoal: shoal-binder=1.5, shoal-planner=0.25" in text
    assert "cpu seconds during raw" not in text

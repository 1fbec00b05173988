"""`shoal bench e2e` measures Shoal, kube-scheduler and the apiserver's bind rate on the same fake nodes and
reports ratios (no wall-clock threshold: only that every phase bound every pod and the figures are sane)."""

from __future__ import annotations

import pytest

from shoal.devstack.benche2e import SHOAL_SERVICES, run, table


@pytest.mark.timeout(600)
async def test_small_e2e_benchmark_runs_every_phase(stack):
    result = await run(stack, pods=20, nodes=3, timeout_s=240)
    names = [p["name"] for p in result["phases"]]
    assert names == ["raw", "kube-scheduler", "shoal", "shoal-pregrouped"]
    for phase in result["phases"]:
        assert phase["pods"] == 20 and phase["pods_per_second"] > 0 and 0 < phase["p50_ms"] <= phase["p99_ms"]
    for phase in result["phases"][2:]:  # Shoal's phases report each service's CPU seconds; they did work
        assert set(phase["cpu_s"]) == {f"shoal-{s}" for s in SHOAL_SERVICES} and sum(phase["cpu_s"].values()) > 0
    assert set(result["ratios"]) == {"shoal_vs_kube_scheduler_throughput", "shoal_vs_apiserver_bind_limit",
                                     "shoal_vs_kube_scheduler_p50", "shoal_vs_kube_scheduler_p99",
                                     "shoal_pregrouped_vs_kube_scheduler_throughput",
                                     "shoal_pregrouped_vs_apiserver_bind_limit"}
    assert "kube-scheduler" in table(result) and "cpu seconds during shoal-pregrouped" in table(result)

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.nodeagent.timeslice import compute_plan, largest_remainder, mps_env

from .helpers import share


def frac_share(name, x, mode):
    return share(name, 1000, fraction=x, limit_fraction=(x if mode == "strict" else 1))


def test_run_ai_example_half_gets_two_and_a_half_seconds():
    plan = compute_plan([frac_share("a", "0.5", "strict")], "strict")
    assert plan.n_slots == 20 and plan.plan_ms == 5000 and plan.lease_ms == 250
    assert plan.per_pod["ns/a"] * plan.lease_ms == 2500
    assert plan.slots.count(None) == 10


def test_strict_quarter_and_memory_pods():
    plan = compute_plan([frac_share("a", "0.25", "strict"), share("m", 1000)], "strict")
    assert plan.per_pod == {"ns/a": 5, "ns/m": 0}


def test_fair_splits_spare_and_idle_lend():
    shares = [frac_share("a", "0.25", "fair"), frac_share("b", "0.5", "fair")]
    plan = compute_plan(shares, "fair")
    assert plan.per_pod == {"ns/a": 7, "ns/b": 13} or plan.per_pod == {"ns/a": 8, "ns/b": 12}
    assert None not in plan.slots
    idle = compute_plan(shares, "fair", active=frozenset({"ns/a"}))
    assert idle.per_pod == {"ns/a": 20, "ns/b": 0}
    rotated = {compute_plan(shares, "fair", plan_no=i).per_pod["ns/a"] for i in range(2)}
    assert rotated == {7, 8}  # the odd spare slot rotates between plans


def test_slots_interleave():
    plan = compute_plan([frac_share("a", "0.5", "strict"), frac_share("b", "0.5", "strict")], "strict")
    assert plan.slots[:4] in (("ns/a", "ns/b", "ns/a", "ns/b"), ("ns/b", "ns/a", "ns/b", "ns/a"))


def test_bad_mode():
    with pytest.raises(ValueError):
        compute_plan([], "none")


@given(st.lists(st.integers(min_value=1, max_value=19), min_size=1, max_size=6), st.sampled_from(["strict", "fair"]),
       st.integers(min_value=0, max_value=5))
def test_plan_invariants(twentieths, mode, plan_no):
    shares = [frac_share(f"p{i}", Fraction(t, 20), mode) for i, t in enumerate(twentieths)]
    plan = compute_plan(shares, mode, plan_no=plan_no)
    assert sum(plan.per_pod.values()) <= plan.n_slots
    assert len(plan.slots) == plan.n_slots
    for s in shares:
        assert plan.slots.count(s.pod_key) == plan.per_pod[s.pod_key]
    if sum(twentieths) <= 20:
        for s, t in zip(shares, twentieths, strict=True):
            assert plan.per_pod[s.pod_key] >= t  # everyone gets at least its request
            if mode == "strict":
                assert plan.per_pod[s.pod_key] == t
        if mode == "fair":
            assert None not in plan.slots


def test_largest_remainder_total():
    got = largest_remainder({"a": Fraction(10, 3), "b": Fraction(10, 3), "c": Fraction(10, 3)}, 20)
    assert sum(got.values()) == 10 and sorted(got.values()) == [3, 3, 4]


def test_mps_env_values():
    s = share("a", 4096, 8192, fraction="0.25", limit_fraction="1")
    assert mps_env(s, "strict") == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
                                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8192M"}
    assert mps_env(s, "fair")["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "100"


def test_mps_env_none_mode_is_spatial_split_and_memory_pods_get_limit():
    s = share("a", 4096, fraction="0.3", limit_fraction="1")
    assert mps_env(s, "none")["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    mem = share("m", 2048)
    assert mps_env(mem, "strict") == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100",
                                      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2048M"}

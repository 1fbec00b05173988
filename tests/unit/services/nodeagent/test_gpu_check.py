"""The pure parts of tests/gpu/check_gpu.py (the real-GPU check itself needs a GPU and is not run in CI)."""

import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[3] / "gpu" / "check_gpu.py"
spec = importlib.util.spec_from_file_location("check_gpu", PATH)
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_parse_args_defaults_and_subset(monkeypatch):
    monkeypatch.setenv("OUT", "/tmp/out-x")
    args = check.parse_args([])
    assert args.out == "/tmp/out-x" and args.steps == list(check.STEPS) and args.worker is None
    assert check.parse_args(["--steps", "p0, p2", "--out", "o"]).steps == ["p0", "p2"]
    with pytest.raises(SystemExit):
        check.parse_args(["--steps", "p9"])


def test_evaluate_p1_overhead_and_failures():
    good = [{"gib": 1, "used_mib": 1024 + 300, "start_ticks_match": True},
            {"gib": 4, "used_mib": 4096 + 310, "start_ticks_match": True}]
    assert check.evaluate_p1(good) == {"pass": True, "context_overhead_mib": 310}
    assert not check.evaluate_p1([{"gib": 1, "used_mib": None}])["pass"]
    assert not check.evaluate_p1([{"gib": 1, "used_mib": 900, "start_ticks_match": True}])["pass"]  # under-reported
    assert not check.evaluate_p1([{"gib": 1, "used_mib": 1300, "start_ticks_match": False}])["pass"]
    assert not check.evaluate_p1([])["pass"]


def test_evaluate_policing_and_mps_limit():
    ok = {"offender_pid": 5, "killed_pid": 5, "samples_to_kill": 1, "freed_after_s": 0.4, "within_share_alive": True}
    assert check.evaluate_p2(ok)["pass"]
    assert not check.evaluate_p2({**ok, "killed_pid": 6})["pass"]
    assert not check.evaluate_p2({**ok, "within_share_alive": False})["pass"]
    assert not check.evaluate_p2({**ok, "freed_after_s": 3.0})["pass"]
    assert check.evaluate_p3({"first_rc": 0, "second_rc": 2, "survived": True})["pass"]
    assert not check.evaluate_p3({"first_rc": 0, "second_rc": 0, "survived": True})["pass"]


def test_ratios_and_summary():
    assert check.evaluate_ratio([100, 300], 3.0, 2.4, 3.6) == {"pass": True, "ratio": 3.0, "expected": 3.0}
    assert not check.evaluate_ratio([100, 150], 3.0, 2.4, 3.6)["pass"]
    assert not check.evaluate_ratio([0, 10], 1.0, 0.8, 1.25)["pass"]
    summary = check.summarize({"p0": {"pass": True}, "p3": {"pass": False, "error": "x"}})
    assert summary == {"passed": ["p0"], "failed": ["p3"], "ok": False}
    assert not check.summarize({})["ok"]


def test_kernel_is_ptx_with_the_entry_point():
    assert ".entry spin(" in check.SPIN_PTX and ".target sm_80" in check.SPIN_PTX

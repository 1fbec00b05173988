"""`shoal simulate` as users run it: the console script in a subprocess, plus in-process edge cases."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.cli.main import main

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def console_script() -> list[str]:
    found = shutil.which("shoal", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return [found] if found else [sys.executable, "-m", "shoal.cli.main"]


def test_console_script_runs_a_scenario(tmp_path: Path) -> None:
    timings = tmp_path / "timings.json"
    proc = subprocess.run([*console_script(), "simulate", "-f", str(SCENARIOS / "s01_gang_cannot_fit" / "cluster.yaml"),
                           "--cycles", "2", "--timings", str(timings)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # json is the default when stdout is not a terminal
    assert [c["cycle"] for c in data["cycles"]] == [1, 2]
    assert data["cycles"][0]["unschedulable"][0]["reason"] == "PodSchedulingErrors"
    assert data["final"]["podGroups"]["team/pg-train-job-train"] == {"running": 0, "pending": 3, "pipelined": 0}
    rows = json.loads(timings.read_text())
    assert [r["cycle"] for r in rows] == [1, 2]
    assert set(rows[0]["action_durations_ms"]) == {"allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"}
    assert rows[0]["total_duration_ms"] >= rows[0]["action_durations_ms"]["allocate"]


def test_console_script_bad_input_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Queue\nmetadata: {name: q}\nspec: {resources: {gpu: {quota: lots}}}\n---\n"
                   "kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '1x'}}\n")
    proc = subprocess.run([*console_script(), "simulate", "-f", str(bad)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"{bad}:1: spec.resources.gpu.quota: not a number: 'lots'",
        f"{bad}:2: status.allocatable.cpu: invalid quantity '1x': unknown suffix 'x'",
    ]


def test_help_documents_input_and_output(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for needle in ("SchedulerConfig", "gpu-fraction", "fairShare", "millicores", "--timings", "exits 2"):
        assert needle in text


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("a: [1, 2\n", ":1: document: invalid YAML"),
        ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{resources: {limits: {nvidia.com/gpu: '0.5'}}}]}\n",
         ":1: spec.containers.resources.nvidia.com/gpu: must be a whole number of GPUs"),
        ("- just\n- a list\n", ":1: document: a document must be a mapping"),
        ("kind: Queue\nmetadata: {name: q}\nspec: {resources: {gpu: {quota: -5}}}\n",
         ":1: spec.resources.gpu.quota: must be -1 (unlimited) or >= 0, got -5"),
    ],
)
def test_bad_input_in_process(tmp_path: Path, capsys, content: str, expected: str) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(content)
    assert main(["simulate", "-f", str(path), "--output", "json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{path}{expected}" in err


def test_missing_file_and_bad_now(tmp_path: Path, capsys) -> None:
    assert main(["simulate", "-f", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    good = SCENARIOS / "s02_gang_fits" / "cluster.yaml"
    assert main(["simulate", "-f", str(good), "--now", "yesterday"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "--now" in err


def test_bad_config_document(tmp_path: Path, capsys) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: shoal.io/v1alpha1\nkind: SchedulerConfig\nspec: {placementStrategy: {gpu: tight}}\n")
    good = SCENARIOS / "s02_gang_fits" / "cluster.yaml"
    assert main(["simulate", "-f", str(good), "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip() == f"{config}:1: spec.placementStrategy.gpu: must be binpack or spread"


def test_directory_input_and_table_output(capsys) -> None:
    assert main(["simulate", "-f", str(SCENARIOS / "s30_two_halves_share_one_card"), "--output", "table"]) == 2
    # the directory holds expect.yaml, which is not a Kubernetes document: reported, not ignored
    assert "expect.yaml:1: kind: is required" in capsys.readouterr().err
    assert main(["simulate", "-f", str(SCENARIOS / "s30_two_halves_share_one_card" / "cluster.yaml"),
                 "--output", "table"]) == 0
    text = capsys.readouterr().out
    assert "bind" in text and "team/h1" in text and "== final ==" in text

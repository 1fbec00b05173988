"""`shoal bench core --files`: the per-action eviction figures and the needed-victims check, on manifests."""

from __future__ import annotations

import json
from pathlib import Path

from shoal.cli.main import main

SCENARIOS = Path(__file__).parents[2] / "scenarios"


def test_bench_files_reports_evictions_per_action(capsys):
    path = str(SCENARIOS / "s39_reclaim_guard_same_resource" / "cluster.yaml")
    assert main(["bench", "core", "--files", path, "--repeat", "1", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["cluster"] == "cluster.yaml" and row["nodes"] == 1 and row["pending"] == 3
    assert (row["binds"], row["pipelined"], row["evictions"]) == (1, 2, 2)
    reclaim = row["actions"]["reclaim"]
    assert (reclaim["evictions"], reclaim["pipelined"], reclaim["evictions_per_pipelined"]) == (2, 2, 1.0)
    assert reclaim["counters"]["victims_simulated"] >= 2
    assert row["unneeded_evictions"] == 0
    assert main(["bench", "core", "--files", path, "--repeat", "1"]) == 0
    table = capsys.readouterr().out
    assert "ev/pipe" in table and "reclaim" in table and "victims_simulated=" in table


def test_bench_files_bad_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\nmetadata: {name: p}\nspec: {containers: 3}\n")
    code = main(["bench", "core", "--files", str(bad), "--repeat", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("--files:")


def test_a_file_named_with_a_control_character_is_reported_on_one_line(tmp_path, capsys, monkeypatch):
    missing = str(tmp_path / "no\rfile.yaml")
    for argv in (["bench", "core", "--files", missing, "--repeat", "1"],
                 ["bench", "snapshot", "--files", missing, "--repeat", "1"]):
        for name in ("SHOAL_KUBECONFIG", "SHOAL_REDIS_URL", "SHOAL_KAFKA_BOOTSTRAP"):  # no stack to attach to
            monkeypatch.delenv(name, raising=False)
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "\r" not in err, err
        assert "no\\rfile.yaml" in err and "no such file" in err

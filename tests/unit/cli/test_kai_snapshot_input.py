"""`shoal simulate` replays KAI's own snapshot (the /get-snapshot zip or its snapshot.json)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from shoal.cli.main import main

SNAPSHOT = {
    "config": {"actions": "allocate, reclaim", "tiers": [{"plugins": [{"name": "proportion"}, {"name": "gpuspread"}]}]},
    "schedulerParams": {},
    "rawObjects": {
        # typed Go lists carry no kind/apiVersion
        "nodes": [{"metadata": {"name": "n1", "labels": {"nvidia.com/gpu.memory": "40960"}},
                   "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"}}}],
        "queues": [{"metadata": {"name": "q"}, "spec": {"resources": {
            r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")}}}],
        "podGroups": [{"metadata": {"name": "pg-a", "namespace": "ns"}, "spec": {"minMember": 2, "queue": "q"}}],
        "pods": [{"metadata": {"name": f"a-{i}", "namespace": "ns", "annotations": {"pod-group-name": "pg-a"}},
                  "spec": {"schedulerName": "kai-scheduler",
                           "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                  "status": {"phase": "Pending"}} for i in range(2)],
        "configMaps": [{"metadata": {"name": "ignored"}}],
        "bindRequests": [],
    },
}


def test_replays_a_kai_snapshot_zip(tmp_path: Path, capsys) -> None:
    archive = tmp_path / "snapshot.gzip"  # KAI's docs save the zip under this name
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("snapshot.json", json.dumps(SNAPSHOT))
    assert main(["simulate", "-f", str(archive), "--output", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sorted(b["pod"] for b in data["cycles"][0]["binds"]) == ["ns/a-0", "ns/a-1"]
    assert data["final"]["podGroups"]["ns/pg-a"] == {"running": 2, "pending": 0, "pipelined": 0}


def test_snapshot_json_problems_name_the_raw_object(tmp_path: Path, capsys) -> None:
    broken = json.loads(json.dumps(SNAPSHOT))
    broken["rawObjects"]["nodes"][0]["status"]["allocatable"]["cpu"] = "eight"
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(broken))
    assert main(["simulate", "-f", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == f"{path}:1: rawObjects.nodes[0].status.allocatable.cpu: invalid quantity 'eight'"


def test_kai_config_becomes_scheduler_config() -> None:
    from shoal.cli.manifests import _kai_config

    config = _kai_config(SNAPSHOT["config"])
    assert config["spec"] == {"actions": ["allocate", "reclaim"], "placementStrategy": {"gpu": "spread"}}
    assert _kai_config({}) is None

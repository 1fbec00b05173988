"""Acceptance scenarios (reference §10, seed 000) run through `shoal simulate`, in-process.

Each directory holds manifests (every *.yaml except expect.yaml / config.yaml) and `expect.yaml`:
  description, cycles (default 1), now (RFC3339), config (a file in the directory → --config),
  xfail (a reason: the scenario needs behaviour not built yet; strict),
  checks: per cycle (`cycle: N | last | all`) — binds / pipelined / evictions (exact pod sets),
    evictedAs {pod: {action, by, message}}, bindCount, bindNodes {pod: node}, gpuGroups {pod: [..]}, gpuGroupsNot {pod: [..]},
    sameGpuGroup [pods], fractions {pod: x}, reserveOps n,
    unschedulable (a list: [] = none; else each item must match one entry by podGroup or
    podGroupPrefix, with reason / message / messageStartsWith / messageContains),
    notUnschedulable [groups], notUnschedulablePrefix [prefixes], queues {q: {gpu: {fairShare: 7}}},
  final: pods {pod: {phase, node, nominatedNode}}, podGroups {group: {running, pending, pipelined, corePods}},
    annotations {group: {key: value}} (PodGroup annotations the plan wrote back).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from shoal.cli.main import main
from shoal.cli.manifests import load_documents
from shoal.cli.simulation import simulate
from shoal.core.plan import Reserve

HERE = Path(__file__).parent
SCENARIOS = sorted(p for p in HERE.iterdir() if (p / "expect.yaml").is_file())


def manifest_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.yaml") if p.name not in ("expect.yaml", "config.yaml"))


def run_simulate(directory: Path, expect: dict, capsys) -> dict:
    argv = ["simulate", "--output", "json", "--cycles", str(expect.get("cycles", 1))]
    for path in manifest_files(directory):
        argv += ["-f", str(path)]
    if expect.get("config"):
        argv += ["--config", str(directory / expect["config"])]
    if expect.get("now"):
        argv += ["--now", expect["now"]]
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def direct_simulation(directory: Path, expect: dict):
    """The same simulation the CLI runs, for what its JSON does not show (Reserve ops, annotations)."""
    docs, _ = load_documents([str(p) for p in manifest_files(directory)])
    config = None
    if expect.get("config"):
        config, _ = load_documents([str(directory / expect["config"])])
        config = config[0]
    result = simulate(docs, cycles=expect.get("cycles", 1), now=expect.get("now"), config_doc=config)
    assert not result.problems, result.problems
    return result


def check_annotations(documents: list[dict], wanted: dict) -> None:
    groups = {f"{d['metadata'].get('namespace') or 'default'}/{d['metadata']['name']}": d
              for d in documents if d.get("kind") == "PodGroup"}
    for group, expected in wanted.items():
        have = groups[group]["metadata"].get("annotations") or {}
        for key, value in expected.items():
            assert have.get(key) == value, (group, key, have)


def _match_group(entry: dict, want: dict) -> bool:
    if "podGroup" in want:
        return entry["podGroup"] == want["podGroup"]
    return entry["podGroup"].startswith(want["podGroupPrefix"])


def check_unschedulable(listed: list[dict], wanted: list[dict]) -> None:
    if wanted == []:
        assert listed == [], f"expected no unschedulable groups, got {listed}"
        return
    for want in wanted:
        found = [e for e in listed if _match_group(e, want)]
        assert found, f"no unschedulable entry for {want} in {listed}"
        entry = found[0]
        if "reason" in want:
            assert entry["reason"] == want["reason"], entry
        if "message" in want:
            assert entry["message"] == want["message"]
        if "messageStartsWith" in want:
            assert entry["message"].startswith(want["messageStartsWith"]), entry["message"]
        for text in want.get("messageContains", ()):
            assert text in entry["message"], entry["message"]


def check_cycle(cycle: dict, check: dict, reserves: int | None) -> None:
    binds = {b["pod"]: b for b in cycle["binds"]}
    if "binds" in check:
        assert sorted(binds) == sorted(check["binds"])
    if "bindCount" in check:
        assert len(binds) == check["bindCount"], sorted(binds)
    for pod, node in check.get("bindNodes", {}).items():
        assert binds[pod]["node"] == node, binds.get(pod)
    for pod, groups in check.get("gpuGroups", {}).items():
        assert binds[pod]["gpuGroups"] == groups, binds[pod]
    for pod, groups in check.get("gpuGroupsNot", {}).items():
        assert binds[pod]["gpuGroups"] and binds[pod]["gpuGroups"] != groups, binds[pod]
    if "sameGpuGroup" in check:
        groups = {tuple(binds[p]["gpuGroups"]) for p in check["sameGpuGroup"]}
        assert len(groups) == 1 and len(next(iter(groups))) == 1, groups
    for pod, fraction in check.get("fractions", {}).items():
        assert binds[pod]["fraction"] == fraction, binds[pod]
    if "reserveOps" in check:
        assert reserves == check["reserveOps"]
    if "pipelined" in check:
        assert sorted(p["pod"] for p in cycle["pipelined"]) == sorted(check["pipelined"])
    if "evictions" in check:
        assert sorted(e["pod"] for e in cycle["evictions"]) == sorted(check["evictions"])
    evicted = {e["pod"]: e for e in cycle["evictions"]}
    for pod, fields in check.get("evictedAs", {}).items():
        for name, value in fields.items():
            assert evicted[pod][name] == value, evicted.get(pod)
    if "unschedulable" in check:
        check_unschedulable(cycle["unschedulable"], check["unschedulable"])
    groups = {e["podGroup"] for e in cycle["unschedulable"]}
    for name in check.get("notUnschedulable", ()):
        assert name not in groups, cycle["unschedulable"]
    for prefix in check.get("notUnschedulablePrefix", ()):
        assert not any(g.startswith(prefix) for g in groups), cycle["unschedulable"]
    for queue, resources in check.get("queues", {}).items():
        for resource, figures in resources.items():
            for figure, value in figures.items():
                assert cycle["queues"][queue][resource][figure] == value, (queue, resource, figure, cycle["queues"][queue])


def check_final(final: dict, want: dict) -> None:
    for pod, fields in want.get("pods", {}).items():
        for name, value in fields.items():
            assert final["pods"][pod][name] == value, (pod, final["pods"][pod])
    for group, counts in want.get("podGroups", {}).items():
        for name, value in counts.items():
            assert final["podGroups"][group][name] == value, (group, final["podGroups"][group])


def _params():
    out = []
    for directory in SCENARIOS:
        expect = yaml.safe_load((directory / "expect.yaml").read_text())
        marks = [pytest.mark.xfail(strict=True, reason=expect["xfail"])] if expect.get("xfail") else []
        out.append(pytest.param(directory, id=directory.name, marks=marks))
    return out


@pytest.mark.parametrize("directory", _params())
def test_scenario(directory: Path, capsys) -> None:
    expect = yaml.safe_load((directory / "expect.yaml").read_text())
    output = run_simulate(directory, expect, capsys)
    cycles = output["cycles"]
    assert [c["cycle"] for c in cycles] == list(range(1, expect.get("cycles", 1) + 1))
    needs_direct = any("reserveOps" in c for c in expect.get("checks", ())) or "annotations" in expect.get("final", {})
    direct = direct_simulation(directory, expect) if needs_direct else None
    reserves = [len(c.plan.of(Reserve)) for c in direct.cycles] if direct is not None else []
    for check in expect.get("checks", ()):
        which = check.get("cycle", 1)
        indexes = range(len(cycles)) if which == "all" else [len(cycles) - 1 if which == "last" else which - 1]
        for i in indexes:
            check_cycle(cycles[i], check, reserves[i] if reserves else None)
    check_final(output["final"], expect.get("final", {}))
    if direct is not None:
        check_annotations(direct.documents, expect.get("final", {}).get("annotations", {}))


def test_every_scenario_has_checks() -> None:
    assert len(SCENARIOS) >= 25
    for directory in SCENARIOS:
        expect = yaml.safe_load((directory / "expect.yaml").read_text())
        assert expect.get("checks") or expect.get("final"), directory.name
        assert manifest_files(directory), directory.name

"""`kubectl shoal` argument handling: kubectl's flags before or after the verb, the kubeconfig and context kubectl
would use (and the context's namespace), one-line errors; `--help` on every verb."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shoal.cli import kubectl

KUBECONFIG = {"apiVersion": "v1", "kind": "Config", "current-context": "dev",
              "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}},
                           {"name": "ops", "context": {"cluster": "c", "user": "u"}}],
              "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
              "users": [{"name": "u", "user": {"token": "t"}}]}


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    return path


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return kubectl.build_parser().parse_args(list(argv))


def test_flags_are_read_before_and_after_the_verb() -> None:
    before = parse("-n", "ns1", "-o", "json", "--context", "ops", "explain", "pod-0")
    assert (before.verb, before.target, before.namespace, before.output, before.context) == (
        "explain", "pod-0", "ns1", "json", "ops")
    after = parse("-n", "ns1", "explain", "pod-0", "-n", "ns2", "-o", "yaml", "--kubeconfig", "/k")
    assert (after.namespace, after.output, after.kubeconfig) == ("ns2", "yaml", "/k")
    events = parse("events", "-A", "-w")
    assert events.all_namespaces and events.follow and events.output is None
    assert parse("top", "node").what == "node" and parse("top").what is None


def test_the_api_url_comes_from_the_flag_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOAL_API_URL", "http://api:8080")
    assert parse("queues").api == "http://api:8080"
    assert parse("queues", "--api", "http://other").api == "http://other"
    monkeypatch.delenv("SHOAL_API_URL")
    args = parse("queues")
    assert args.api is None and args.api_service == "shoal-system/shoal-api"


def test_bad_output_format_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_:
        parse("queues", "-o", "table")
    assert exit_.value.code == 2


def test_the_kubeconfig_and_namespace_are_kubectls(config_file: Path, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    assert kubectl.kube_context(str(config_file), None) == (config_file, "dev", "team-a")
    assert kubectl.kube_context(str(config_file), "ops") == (config_file, "ops", "default")
    # $KUBECONFIG: the first file of the list that exists
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{config_file}")
    assert kubectl.kube_context(None, None) == (config_file, "dev", "team-a")
    with pytest.raises(ValueError, match="context 'nope' not found in kubeconfig"):
        kubectl.kube_context(str(config_file), "nope")
    with pytest.raises(ValueError, match="kubeconfig /absent/config does not exist"):
        kubectl.kube_context("/absent/config", None)


def run_cli(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal.cli.kubectl", *argv], capture_output=True, text=True,
                          timeout=60, env=env)


@pytest.mark.parametrize("verb", ["explain", "queues", "events", "top"])
def test_every_verb_has_help(verb: str) -> None:
    done = run_cli(verb, "--help")
    assert done.returncode == 0 and f"usage: kubectl shoal {verb}" in done.stdout
    assert "--kubeconfig" in done.stdout and "-o {json,yaml,wide}" in done.stdout


def test_errors_are_one_line(config_file: Path, tmp_path: Path) -> None:
    missing = run_cli("queues", "--kubeconfig", str(tmp_path / "none"))
    assert missing.returncode == 1 and missing.stderr.strip().count("\n") == 0
    assert missing.stderr.startswith("kubectl shoal: kubeconfig ")
    bad_target = run_cli("explain", "a/b/c", "--kubeconfig", str(config_file), "--api", "http://127.0.0.1:1")
    assert bad_target.returncode == 1 and bad_target.stderr.strip().count("\n") == 0
    assert "cannot read 'a/b/c'" in bad_target.stderr
    no_verb = run_cli()
    assert no_verb.returncode == 2 and "usage: kubectl shoal" in no_verb.stdout

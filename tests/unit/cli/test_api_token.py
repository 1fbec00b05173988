"""The token the CLIs send to the api service comes from the kubeconfig as the Kubernetes client reads it: a
`token`, a `tokenFile`, an `exec` plugin's; none for a user without one (client certificates are not passed on)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from shoal.cli.explain import kubeconfig_token


def kubeconfig(tmp_path: Path, user: dict) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "users": [{"name": "u", "user": user}]}))
    return path


def exec_plugin(tmp_path: Path) -> dict:
    script = tmp_path / "plugin.py"
    script.write_text('import json; print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", '
                      '"kind": "ExecCredential", "status": {"token": "from-exec"}}))\n')
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": [str(script)], "interactiveMode": "Never"}}


@pytest.mark.parametrize("kind", ["token", "tokenFile", "exec", "none"])
def test_the_kubeconfig_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    (tmp_path / "token").write_text("from-file\n")
    user = {"token": {"token": "inline"}, "tokenFile": {"tokenFile": str(tmp_path / "token")},
            "exec": exec_plugin(tmp_path), "none": {"username": "u", "password": "p"}}[kind]
    monkeypatch.setenv("SHOAL_KUBECONFIG", str(kubeconfig(tmp_path, user)))
    want = {"token": "inline", "tokenFile": "from-file", "exec": "from-exec", "none": None}[kind]
    assert kubeconfig_token() == want


def test_no_kubeconfig_means_no_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOAL_KUBECONFIG", str(tmp_path / "missing"))
    assert kubeconfig_token() is None

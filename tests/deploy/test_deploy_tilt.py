"""The Tiltfile is executed by the real Tilt (`tilt alpha tiltfile-result`, no cluster needed; exit 5 means a
Tiltfile error): it builds an image per service with live updates, applies the dev overlay, forwards the
api's port and runs the unit tests locally. Tilt is built by `bash deploy/tools/build-tilt.sh` (as in CI);
a missing binary fails this test with that command."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from deploy_support import REPO, SERVICES, kubectl_path

SITE = "/opt/shoal/lib/python3.11/site-packages"
BUILD_TILT = REPO / "deploy" / "tools" / "build-tilt.sh"


def tilt_path() -> Path:
    """Where the build script puts Tilt (it names the binary's variant; `--path` builds nothing)."""
    out = subprocess.run(["bash", str(BUILD_TILT), "--path"], capture_output=True, text=True, check=True).stdout
    return Path(out.strip().splitlines()[-1])


KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: kind-shoal
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: kind-shoal
  user: {token: unused}
contexts:
- name: kind-shoal
  context: {cluster: kind-shoal, user: kind-shoal}
current-context: kind-shoal
"""


def run_tiltfile(tiltfile: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    tilt = tilt_path()
    if not tilt.is_file():
        pytest.fail(f"tilt not found at {tilt}: build it with `bash deploy/tools/build-tilt.sh`", pytrace=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),  # a local-looking context; nothing is contacted
        "PATH": f"{kubectl_path().parent}{os.pathsep}{os.environ.get('PATH', '')}",  # `kubectl kustomize`
        "HOME": str(tmp_path),  # tilt keeps its settings under ~/.tilt-dev
        "TILT_DISABLE_ANALYTICS": "1",
    }
    return subprocess.run([str(tilt), "alpha", "tiltfile-result", "-f", str(tiltfile)], cwd=tiltfile.parent,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    proc = run_tiltfile(REPO / "Tiltfile", tmp_path_factory.mktemp("tilt"))
    assert proc.returncode == 0, f"tilt exit {proc.returncode} (5 = Tiltfile error):\n{proc.stderr[-5000:]}"
    return json.loads(proc.stdout)


def manifests(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["Name"]: m for m in result["Manifests"]}


def test_tiltfile_builds_every_service_with_live_update(result: dict[str, Any]) -> None:
    ms = manifests(result)
    for service in SERVICES:
        m = ms[f"shoal-{service}"]
        [target] = m["ImageTargets"]
        build = target["BuildDetails"]
        assert build["args"] == [f"SERVICE={service}"] and build["target"] == "dev"
        assert "shoal-dev-entrypoint" in build["dockerfileContents"]
        text = json.dumps(target["LiveUpdateSpec"])
        assert f"{SITE}/shoal" in text and f"{SITE}/services" in text, f"shoal-{service}: no live_update sync"
        assert "/tmp/shoal-restart" in text, f"shoal-{service}: live_update does not restart the service"


def test_tiltfile_wires_resources(result: dict[str, Any]) -> None:
    ms = manifests(result)
    assert {"kafka", "redis", "shoal-admission-certgen", "shoal-crds", "shoal-namespaces-config",
            "unit-tests"} <= set(ms)
    api = ms["shoal-api"]["DeployTarget"]
    forwards = api["portForwardTemplateSpec"]["forwards"]
    assert [(f["containerPort"], f["name"]) for f in forwards] == [(8080, "api")]
    assert "decision stream (SSE)" in [link["Name"] for link in api["Links"]]
    assert "pytest tests/unit" in json.dumps(ms["unit-tests"])
    assert "uncategorized" not in ms, "every object belongs to a named resource"
    # the certgen Job patches the webhook configurations: they are applied with it, before the admission server
    certgen = ms["shoal-admission-certgen"]["DeployTarget"]["yaml"]
    assert "kind: MutatingWebhookConfiguration" in certgen and "kind: ValidatingWebhookConfiguration" in certgen
    assert "shoal-admission-certgen" in ms["shoal-admission"]["ResourceDependencies"]
    for service in SERVICES:
        assert ms[f"shoal-{service}"]["Labels"], f"shoal-{service} has no resource label"
        assert "shoal-crds" in ms[f"shoal-{service}"]["ResourceDependencies"]


def test_a_broken_tiltfile_fails(tmp_path: Path) -> None:
    broken = tmp_path / "Tiltfile"
    broken.write_text("k8s_resource('does-not-exist', labels=['x'])\n")
    proc = run_tiltfile(broken, tmp_path)
    assert proc.returncode == 5, proc.stderr

"""Helpers shared by the deployment checks in tests/deploy (kubectl runner, paths, apply/wait helpers)."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
OVERLAYS = {"base": K8S / "base", "dev": K8S / "overlays" / "dev", "prod": K8S / "overlays" / "prod"}
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SERVICES = ("snapshotter", "podgrouper", "fairshare", "planner", "binder", "nodeagent", "admission", "api")
SYSTEM_NS = "shoal-system"  # every service, Pod Security `restricted`
NODE_NS = "shoal-node"  # the node agent alone, Pod Security `privileged` (hostPID, KILL, SYS_PTRACE)


def service_namespace(service: str) -> str:
    return NODE_NS if service == "nodeagent" else SYSTEM_NS


def service_account(service: str) -> str:
    """The identity a service's pods act as."""
    return f"system:serviceaccount:{service_namespace(service)}:shoal-{service}"


def kubectl_path() -> Path:
    from shoal.devstack import paths

    return paths.k8s_bin("kubectl")


@dataclass
class Kubectl:
    """Runs the stack's kubectl against one kubeconfig, with a private discovery cache."""

    binary: Path
    kubeconfig: str | None
    cache_dir: Path

    def run(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.binary), "--cache-dir", str(self.cache_dir)]
        if self.kubeconfig:
            cmd += ["--kubeconfig", self.kubeconfig]
        cmd += list(args)
        proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)




def exists(kube: Kubectl, kind: str, name: str) -> bool:
    return kube.run("get", kind, name, "--ignore-not-found", "-o", "name", check=False).stdout.strip() != ""


def wait_gone(kube: Kubectl, kind: str, name: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while exists(kube, kind, name):
        if time.monotonic() > deadline:
            raise AssertionError(f"{kind}/{name} still there {timeout_s:.0f}s after delete")
        time.sleep(0.5)


@dataclass
class Installed:
    """What `installed_base` applied for real; `kube` is the admin kubectl."""

    kube: Kubectl
    objects: list[dict[str, Any]] = field(default_factory=list)


def apply_crds(kube: Kubectl, docs: list[dict[str, Any]]) -> None:
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    kube.run("apply", "--server-side", "--force-conflicts", "--field-manager=shoal-deploy-tests", "-f", "-",
             stdin=yaml.safe_dump_all(crds))
    kube.run("wait", "--for=condition=Established", "--timeout=60s",
             *[f"crd/{d['metadata']['name']}" for d in crds])


RBAC_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

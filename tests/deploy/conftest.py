"""Fixtures for the deployment checks: kubectl (built with the dev stack), rendered kustomize overlays, and
Shoal's CRDs, namespaces and RBAC applied for real to the suite's apiserver.

The CRDs stay after the session (other tests need them). Every other cluster-scoped object these fixtures
create (ClusterRoles, ClusterRoleBindings, namespaces that did not exist before, test-only CRDs) is deleted
again, and namespaces are waited for until they are gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import (
    OVERLAYS,
    RBAC_KINDS,
    Installed,
    Kubectl,
    apply_crds,
    exists,
    kubectl_path,
    wait_gone,
)


@pytest.fixture(scope="session")
def kubectl_bin() -> Path:
    binary = kubectl_path()
    if not binary.is_file():
        pytest.fail(
            f"kubectl not found at {binary}: build it with `bash libs/common/shoal/devstack/sh/build-k8s.sh` "
            "(the suite builds it when a test needs the stack)",
            pytrace=False,
        )
    return binary


@pytest.fixture(scope="session")
def offline_kubectl(kubectl_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    """kubectl without a cluster (kustomize, client-side work)."""
    return Kubectl(kubectl_bin, None, tmp_path_factory.mktemp("kubectl-cache"))


@pytest.fixture(scope="session")
def rendered_text(offline_kubectl: Kubectl) -> dict[str, str]:
    """`kubectl kustomize` output of base, dev and prod."""
    return {name: offline_kubectl.run("kustomize", str(path)).stdout for name, path in OVERLAYS.items()}


@pytest.fixture(scope="session")
def rendered(rendered_text: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """The rendered overlays as lists of objects."""
    return {name: [doc for doc in yaml.safe_load_all(text) if doc] for name, text in rendered_text.items()}


@pytest.fixture(scope="session")
def kube(stack: Any, kubectl_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    """kubectl as cluster admin on the suite's apiserver."""
    return Kubectl(kubectl_bin, stack.kubeconfig, tmp_path_factory.mktemp("kubectl-cache"))


@pytest.fixture(scope="session")
def installed_base(kube: Kubectl, rendered: dict[str, list[dict[str, Any]]]) -> Iterator[Installed]:
    """Shoal's CRDs, namespaces, service accounts and RBAC (from the base) applied for real.

    Torn down at the end of the session, except the CRDs and namespaces that existed before."""
    base = rendered["base"]
    apply_crds(kube, base)
    objects = [d for d in base if d["kind"] in RBAC_KINDS]
    namespaces = [d["metadata"]["name"] for d in objects if d["kind"] == "Namespace"]
    preexisting = {ns for ns in namespaces if exists(kube, "namespace", ns)}
    order = ["Namespace", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"]
    objects.sort(key=lambda d: order.index(d["kind"]))
    kube.run("apply", "--server-side", "--force-conflicts", "--field-manager=shoal-deploy-tests", "-f", "-",
             stdin=yaml.safe_dump_all(objects))
    try:
        yield Installed(kube, objects)
    finally:
        for doc in reversed(objects):
            if doc["kind"] == "Namespace":
                continue
            ns = doc["metadata"].get("namespace")
            args = ["delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found", "--wait=false"]
            if ns:
                args += ["-n", ns]
            kube.run(*args, check=False)
        for ns in namespaces:
            if ns not in preexisting:
                kube.run("delete", "namespace", ns, "--ignore-not-found", "--wait=false", check=False)
        for ns in namespaces:
            if ns not in preexisting:
                wait_gone(kube, "namespace", ns)

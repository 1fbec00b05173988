"""Users of the api's access tests on the real apiserver: ServiceAccounts with tokens from the TokenRequest API,
bound to Shoal's viewer ClusterRoles (deploy/k8s/base/rbac/viewers.yaml) in their own namespace or cluster-wide."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml

from shoal.adapters.kube import Resource
from shoal.errors import ConflictError, NotFoundError

VIEWERS = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "base" / "rbac" / "viewers.yaml"
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                                 namespaced=False)
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")


@contextlib.asynccontextmanager
async def viewer_roles(kube: Any) -> AsyncIterator[list[str]]:
    """Shoal's viewer ClusterRoles as the deploy has them (those this created are deleted after)."""
    created = []
    for role in yaml.safe_load_all(VIEWERS.read_text()):
        try:
            await kube.create(CLUSTER_ROLES, role)
            created.append(role["metadata"]["name"])
        except ConflictError:
            await kube.replace(CLUSTER_ROLES, {**role, "metadata": {
                **role["metadata"], "resourceVersion": (await kube.get(CLUSTER_ROLES, role["metadata"]["name"]))[
                    "metadata"]["resourceVersion"]}})
    try:
        yield [r["metadata"]["name"] for r in yaml.safe_load_all(VIEWERS.read_text())]
    finally:
        for name in created:
            with contextlib.suppress(NotFoundError):
                await kube.delete(CLUSTER_ROLES, name)


async def token_of(kube: Any, namespace: str, name: str) -> str:
    """A ServiceAccount `name` in `namespace` and a one-hour token for it (TokenRequest)."""
    await kube.create(SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount",
                                         "metadata": {"name": name, "namespace": namespace}}, namespace=namespace)
    answer = await kube.create(SERVICE_ACCOUNTS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                                  "spec": {"expirationSeconds": 3600}},
                               namespace=namespace, name=name, subresource="token")
    return answer["status"]["token"]


def _subject(namespace: str, name: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


async def bind_in_namespace(kube: Any, namespace: str, account: str, role: str = "shoal-viewer") -> None:
    """A RoleBinding of ClusterRole `role` to the account, in its own namespace (deleted with the namespace)."""
    await kube.create(ROLE_BINDINGS, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": f"{role}-{account}", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [_subject(namespace, account)]}, namespace=namespace)


@contextlib.asynccontextmanager
async def bound_cluster_wide(kube: Any, namespace: str, account: str, *roles: str) -> AsyncIterator[None]:
    """ClusterRoleBindings of `roles` to the account, deleted after."""
    names = []
    try:
        for role in roles:
            name = f"{role}-{account}-{uuid.uuid4().hex[:6]}"
            await kube.create(CLUSTER_ROLE_BINDINGS, {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [_subject(namespace, account)]})
            names.append(name)
        yield
    finally:
        for name in names:
            with contextlib.suppress(NotFoundError):
                await kube.delete(CLUSTER_ROLE_BINDINGS, name)


def kubeconfig_with_token(stack_kubeconfig: str, token: str, path: Path) -> Path:
    """A copy of the stack's kubeconfig whose user authenticates with `token` (no client certificate)."""
    return _kubeconfig_with_user(stack_kubeconfig, {"token": token}, path)


def kubeconfig_with_admin_cert(stack: Any, path: Path) -> Path:
    """A copy of the stack's kubeconfig whose user is the admin by its client certificate (no token)."""
    pki = Path(stack.state_dir) / "pki"
    return _kubeconfig_with_user(stack.kubeconfig, {"client-certificate": str(pki / "admin.crt"),
                                                    "client-key": str(pki / "admin.key")}, path)


def _kubeconfig_with_user(stack_kubeconfig: str, user: dict, path: Path) -> Path:
    config = yaml.safe_load(Path(stack_kubeconfig).read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    config["users"] = [{"name": context["context"]["user"], "user": user}]
    path.write_text(yaml.safe_dump(config))
    return path

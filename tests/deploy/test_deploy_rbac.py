"""Least privilege, proven against the real apiserver: Shoal's RBAC is applied for real and each service
account is impersonated with `kubectl auth can-i --as system:serviceaccount:<namespace>:<sa>` (shoal-system,
or shoal-node for the node agent) for what the service needs (must be allowed) and for a representative set of
things it must not do (must be denied)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import NamedTuple

import pytest
import yaml
from deploy_support import (
    SERVICES,
    SYSTEM_NS,
    Installed,
    exists,
    service_account,
    service_namespace,
    wait_gone,
)

RES_NS = "kai-resource-reservation"
USER_NS = "team-a"  # any workload namespace (need not exist for an RBAC check)


class Check(NamedTuple):
    verb: str
    resource: str  # resource[.group][/subresource]
    namespace: str | None = USER_NS  # None = cluster-wide (--all-namespaces for namespaced resources)


def c(verb: str, resource: str, namespace: str | None = USER_NS) -> Check:
    return Check(verb, resource, namespace)


WATCH = ("get", "list", "watch")


def reads(resource: str, namespace: str | None = None) -> list[Check]:
    return [c(v, resource, namespace) for v in WATCH]


MUST_ALLOW: dict[str, list[Check]] = {
    "snapshotter": [
        *reads("nodes"), *reads("pods"), *reads("configmaps"), *reads("queues.scheduling.run.ai"),
        *reads("podgroups.scheduling.run.ai"), *reads("topologies.kai.scheduler"),
        *reads("priorityclasses.scheduling.k8s.io"), *reads("poddisruptionbudgets.policy"),
    ],
    "podgrouper": [
        *reads("pods"), c("patch", "pods"),
        *[c(v, "podgroups.scheduling.run.ai") for v in ("get", "list", "watch", "create", "update", "patch")],
        *[c(v, owner, None) for owner in (
            "jobs.batch", "jobsets.jobset.x-k8s.io", "leaderworkersets.leaderworkerset.x-k8s.io",
            "deployments.apps", "replicasets.apps", "statefulsets.apps", "pytorchjobs.kubeflow.org",
            "mpijobs.kubeflow.org", "rayclusters.ray.io", "rayjobs.ray.io") for v in WATCH],
        c("create", "events"), c("create", "events.events.k8s.io"),
    ],
    "fairshare": [],
    "planner": [],
    "binder": [
        c("create", "pods/binding"), c("create", "pods/eviction"), c("delete", "pods"), c("patch", "pods"),
        c("get", "pods"), c("list", "pods", None), c("patch", "pods/status"),
        *[c(v, "pods", RES_NS) for v in ("create", "get", "list", "watch", "delete")],
        c("create", "configmaps"), c("patch", "configmaps"),
        c("patch", "podgroups.scheduling.run.ai"), c("patch", "podgroups.scheduling.run.ai/status"),
        c("patch", "queues.scheduling.run.ai/status", None),
        c("create", "events"), c("create", "events.events.k8s.io"),
    ],
    "nodeagent": [
        *reads("pods"), c("patch", "pods", RES_NS), c("create", "events"), c("create", "events.events.k8s.io"),
        *reads("nodes"),
        # MPS/time-slicing: the fraction pods' env ConfigMaps, in whatever namespace the workload runs
        *[c(v, "configmaps", ns) for v in ("get", "create", "patch") for ns in (USER_NS, None)],
    ],
    "admission": [*reads("runtimeclasses.node.k8s.io"), *reads("queues.scheduling.run.ai"), c("get", "pods"),
                  c("list", "pods"), c("create", "events")],
    "api": [*reads("podgroups.scheduling.run.ai"), *reads("pods"), *reads("events"),
            *reads("events.events.k8s.io"), *reads("queues.scheduling.run.ai"),
            # each caller's token and permissions (SHOAL_API_AUTH=kubernetes), through system:auth-delegator
            c("create", "tokenreviews.authentication.k8s.io", None),
            c("create", "subjectaccessreviews.authorization.k8s.io", None)],
}

# Things that would hurt if a service's credentials leaked. Secrets and RBAC/impersonation are denied to all.
FOR_EVERYONE = [c("get", "secrets"), c("list", "secrets", None), c("create", "clusterrolebindings.rbac.authorization.k8s.io", None),
                c("impersonate", "serviceaccounts"), c("escalate", "clusterroles.rbac.authorization.k8s.io", None),
                c("create", "pods/exec"), c("delete", "namespaces", None)]
MUST_DENY: dict[str, list[Check]] = {
    "snapshotter": [c("create", "pods/binding"), c("patch", "pods"), c("delete", "pods"), c("create", "pods/eviction"),
                    c("create", "podgroups.scheduling.run.ai"), c("update", "queues.scheduling.run.ai", None),
                    c("patch", "nodes", None), c("create", "configmaps")],
    "podgrouper": [c("delete", "pods"), c("create", "pods/binding"), c("create", "pods/eviction"),
                   c("delete", "podgroups.scheduling.run.ai"), c("create", "jobs.batch"),
                   c("patch", "queues.scheduling.run.ai", None), c("list", "nodes", None),
                   c("get", "configmaps")],
    "fairshare": [c("list", "pods"), c("get", "queues.scheduling.run.ai", None), c("create", "events")],
    "planner": [c("delete", "pods"), c("create", "pods/binding"), c("create", "pods/eviction"), c("list", "pods"),
                c("get", "queues.scheduling.run.ai", None), c("patch", "podgroups.scheduling.run.ai/status")],
    "binder": [c("create", "pods"), c("watch", "pods"), c("delete", "nodes", None),
               c("update", "queues.scheduling.run.ai", None), c("patch", "queues.scheduling.run.ai", None),
               c("delete", "podgroups.scheduling.run.ai"), c("create", "podgroups.scheduling.run.ai"),
               c("delete", "configmaps"), c("create", "deployments.apps")],
    "nodeagent": [c("delete", "pods"), c("delete", "pods", RES_NS), c("patch", "pods"), c("create", "pods/eviction"),
                  c("create", "pods/binding"), c("patch", "nodes", None), c("update", "nodes", None),
                  c("patch", "podgroups.scheduling.run.ai"),
                  # env ConfigMaps: written, never removed, updated wholesale or enumerated; no secrets at all
                  c("delete", "configmaps"), c("delete", "configmaps", None), c("update", "configmaps"),
                  c("list", "configmaps", None), c("watch", "configmaps"), c("create", "secrets"),
                  c("patch", "secrets"), c("delete", "secrets")],
    "admission": [c("create", "pods"), c("patch", "pods"), c("delete", "pods"), c("watch", "pods"),
                  c("update", "queues.scheduling.run.ai", None), c("patch", "events")],
    "api": [c("delete", "pods"), c("patch", "podgroups.scheduling.run.ai"), c("create", "pods"),
            c("delete", "queues.scheduling.run.ai", None), c("create", "events"),
            c("patch", "queues.scheduling.run.ai/status", None)],
}


# Workload kinds the podgrouper reads that the test apiserver does not serve: kubectl resolves a resource
# through discovery before asking, so these get test-only stand-in CRDs (removed afterwards, unless they
# were already installed).
OWNER_STANDINS = [
    ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
    ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets"),
    ("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
    ("kubeflow.org", "v2beta1", "MPIJob", "mpijobs"),
    ("ray.io", "v1", "RayCluster", "rayclusters"),
    ("ray.io", "v1", "RayJob", "rayjobs"),
]


def standin_crd(group: str, version: str, kind: str, plural: str) -> dict:
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}", "labels": {"shoal.io/test": "owner-standin"}},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                 "versions": [{"name": version, "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": schema}}]},
    }


@pytest.fixture(scope="module")
def owner_kinds(installed_base: Installed) -> Iterator[None]:
    kube = installed_base.kube
    crds = [standin_crd(*row) for row in OWNER_STANDINS]
    missing = [crd for crd in crds if not exists(kube, "crd", crd["metadata"]["name"])]
    if missing:
        kube.run("apply", "--server-side", "--field-manager=shoal-deploy-tests", "-f", "-",
                 stdin=yaml.safe_dump_all(missing))
        kube.run("wait", "--for=condition=Established", "--timeout=60s",
                 *[f"crd/{crd['metadata']['name']}" for crd in missing])
    try:
        yield
    finally:
        for crd in missing:
            kube.run("delete", "crd", crd["metadata"]["name"], "--ignore-not-found", "--wait=false", check=False)
        for crd in missing:
            wait_gone(kube, "crd", crd["metadata"]["name"])


async def can_i(installed: Installed, service: str, check: Check, gate: asyncio.Semaphore,
                identity: str | None = None) -> bool:
    kube = installed.kube
    resource, _, sub = check.resource.partition("/")
    args = [str(kube.binary), "--cache-dir", str(kube.cache_dir), "--kubeconfig", str(kube.kubeconfig),
            "auth", "can-i", check.verb, resource, "--as", identity or service_account(service)]
    if sub:
        args.append(f"--subresource={sub}")
    args += ["--all-namespaces"] if check.namespace is None else ["-n", check.namespace]
    async with gate:
        proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
    answer = out.decode().strip()
    if "doesn't have a resource type" in err.decode():
        raise AssertionError(f"can-i {check}: the apiserver does not serve it, so kubectl cannot ask: {err.decode()}")
    if answer not in ("yes", "no"):
        raise AssertionError(f"can-i {check} as {service}: unexpected answer {answer!r} {err.decode()}")
    return answer == "yes"


async def answers(installed: Installed, service: str, checks: list[Check],
                  identity: str | None = None) -> dict[Check, bool]:
    gate = asyncio.Semaphore(6)
    results = await asyncio.gather(*(can_i(installed, service, ch, gate, identity) for ch in checks))
    return dict(zip(checks, results, strict=True))


def test_every_service_has_its_own_account(installed_base: Installed) -> None:
    accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in installed_base.objects
                if d["kind"] == "ServiceAccount" and d["metadata"]["name"].startswith("shoal-")}
    assert accounts == {(service_namespace(s), f"shoal-{s}") for s in SERVICES}


def test_node_agent_bindings_name_its_shoal_node_account(installed_base: Installed) -> None:
    """Every binding of the node agent's roles names the account in shoal-node, none a leftover in
    shoal-system (which would grant nothing to the running agent, or something to a stray account)."""
    for doc in installed_base.objects:
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding") and "nodeagent" in doc["roleRef"]["name"]:
            assert [(s["namespace"], s["name"]) for s in doc["subjects"]] == [("shoal-node", "shoal-nodeagent")], doc


async def test_node_agent_account_in_shoal_system_has_no_rights(installed_base: Installed) -> None:
    """The identity the node agent had before it moved to shoal-node is granted nothing."""
    old = f"system:serviceaccount:{SYSTEM_NS}:shoal-nodeagent"
    checks = [c("get", "pods"), c("list", "nodes", None), c("patch", "pods", RES_NS), c("create", "configmaps"),
              c("create", "events")]
    got = await answers(installed_base, "nodeagent", checks, identity=old)
    assert not any(got.values()), got


@pytest.mark.parametrize("service", SERVICES)
async def test_service_can_do_what_it_needs(installed_base: Installed, owner_kinds: None, service: str) -> None:
    got = await answers(installed_base, service, MUST_ALLOW[service])
    denied = [f"{ch.verb} {ch.resource} in {ch.namespace or '(all namespaces)'}" for ch, ok in got.items() if not ok]
    assert not denied, f"shoal-{service} lacks permissions it needs: {denied}"


@pytest.mark.parametrize("service", SERVICES)
async def test_service_cannot_do_what_it_must_not(installed_base: Installed, service: str) -> None:
    got = await answers(installed_base, service, MUST_DENY[service] + FOR_EVERYONE)
    allowed = [f"{ch.verb} {ch.resource} in {ch.namespace or '(all namespaces)'}" for ch, ok in got.items() if ok]
    assert not allowed, f"shoal-{service} is allowed more than it needs: {allowed}"


async def test_matrix_can_fail(installed_base: Installed) -> None:
    """Sanity of the method: an account with no bindings is denied, cluster-admin is allowed."""
    got = await answers(installed_base, "does-not-exist", [c("get", "pods")])
    assert got == {c("get", "pods"): False}
    proc = installed_base.kube.run("auth", "can-i", "delete", "pods", "-n", USER_NS, check=False)
    assert proc.stdout.strip() == "yes"

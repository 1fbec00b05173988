"""Every rendered manifest passes the real apiserver's validation and admission (`kubectl apply --server-side
--dry-run=server`, strict field validation), with Shoal's CRDs, namespaces and RBAC installed for real first
so that namespaced and CRD-backed objects validate too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from deploy_support import FIXTURES, NODE_NS, SYSTEM_NS, Installed, Kubectl, wait_gone


@pytest.fixture(scope="module")
def cert_manager_standins(installed_base: Installed) -> Iterator[None]:
    """Test-only stand-ins for cert-manager's CRDs (the prod overlay has an Issuer and a Certificate)."""
    kube = installed_base.kube
    path = FIXTURES / "cert-manager-standin-crds.yaml"
    kube.run("apply", "--server-side", "--field-manager=shoal-deploy-tests", "-f", str(path))
    kube.run("wait", "--for=condition=Established", "--timeout=60s",
             "crd/issuers.cert-manager.io", "crd/certificates.cert-manager.io")
    try:
        yield
    finally:
        kube.run("delete", "-f", str(path), "--ignore-not-found", "--wait=false", check=False)
        for name in ("issuers.cert-manager.io", "certificates.cert-manager.io"):
            wait_gone(kube, "crd", name)


def dry_run(kube: Kubectl, manifest: str) -> str:
    proc = kube.run("apply", "--server-side", "--dry-run=server", "--force-conflicts", "--validate=strict",
                    "--field-manager=shoal-deploy-tests", "-f", "-", stdin=manifest, check=False)
    assert proc.returncode == 0, f"server dry-run rejected the manifests:\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_overlay_passes_server_side_dry_run(
    installed_base: Installed, cert_manager_standins: None, rendered_text: dict[str, str],
    rendered: dict[str, list[dict]], overlay: str,
) -> None:
    out = dry_run(installed_base.kube, rendered_text[overlay])
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len([ln for ln in lines if "(server dry run)" in ln]) == len(rendered[overlay]), out
    # shoal-system enforces the restricted Pod Security profile: nothing there may even warn; shoal-node
    # (the node agent alone) is privileged and does not warn either
    assert "PodSecurity" not in out, out
    # no API in use is deprecated or unknown to this Kubernetes version
    assert "deprecated" not in out.lower() and "unknown field" not in out, out


def test_dry_run_really_validates(installed_base: Installed) -> None:
    """The check above can fail: a Deployment with an unknown field and a bad CR are rejected."""
    bad_deployment = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: shoal-bad, namespace: shoal-system}
spec:
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      containers: [{name: c, image: shoal-api, livenessProbe: {httpGet: {path: /healthz, port: http}}, bogus: 1}]
"""
    proc = installed_base.kube.run("apply", "--server-side", "--dry-run=server", "--validate=strict",
                                   "-f", "-", stdin=bad_deployment, check=False)
    assert proc.returncode != 0 and "bogus" in proc.stderr
    bad_queue = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: shoal-bad-queue}
spec: {resources: {gpu: {quota: "two"}}}
"""
    proc = installed_base.kube.run("apply", "--server-side", "--dry-run=server", "-f", "-", stdin=bad_queue,
                                   check=False)
    assert proc.returncode != 0 and "spec.resources.gpu.quota" in proc.stderr


def agent_pod(rendered: dict[str, list[dict]], namespace: str, account: str) -> str:
    """A Pod with the prod node-agent DaemonSet's pod template, as the DaemonSet controller would create it."""
    [ds] = [d for d in rendered["prod"] if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "shoal-nodeagent"]
    template: dict[str, Any] = ds["spec"]["template"]
    spec = {**template["spec"], "serviceAccountName": account, "nodeName": "node-psa-check"}
    del spec["runtimeClassName"]  # the suite's cluster has no `nvidia` RuntimeClass; it is no security setting
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
           "metadata": {"name": "shoal-nodeagent-psa-check", "namespace": namespace, **template["metadata"]}}
    return json.dumps(pod)


def test_node_agent_pod_is_admitted_only_in_its_privileged_namespace(
    installed_base: Installed, rendered: dict[str, list[dict]],
) -> None:
    """Pod Security is enforced on pods: the node agent's real pod (hostPID, uid 0, KILL/SYS_PTRACE/
    DAC_READ_SEARCH) is admitted in shoal-node without a warning and refused in restricted shoal-system, which
    is why it has a namespace of its own."""
    kube = installed_base.kube
    ok = kube.run("apply", "--server-side", "--dry-run=server", "--validate=strict",
                  "--field-manager=shoal-deploy-tests", "-f", "-",
                  stdin=agent_pod(rendered, NODE_NS, "shoal-nodeagent"), check=False)
    assert ok.returncode == 0, ok.stderr
    assert "(server dry run)" in ok.stdout and "PodSecurity" not in ok.stdout + ok.stderr, ok.stdout + ok.stderr
    # in shoal-system under an account that exists there, so that only Pod Security can refuse it
    denied = kube.run("apply", "--server-side", "--dry-run=server", "--field-manager=shoal-deploy-tests",
                      "-f", "-", stdin=agent_pod(rendered, SYSTEM_NS, "shoal-api"), check=False)
    assert denied.returncode != 0
    assert 'violates PodSecurity "restricted' in denied.stderr, denied.stderr
    for reason in ("hostPID=true", "KILL", "SYS_PTRACE", "DAC_READ_SEARCH", "runAsUser=0"):
        assert reason in denied.stderr, f"{reason} not among the refusal's reasons: {denied.stderr}"

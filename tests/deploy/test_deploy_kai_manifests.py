"""KAI users' manifests apply unchanged to Shoal's CRDs (strict field validation: no field is unknown or
dropped), and invalid ones are rejected with a clear message by the CRDs' OpenAPI/CEL rules. The manifests
follow the field layout of KAI-Scheduler's documentation (queues with resources.<r>.quota/limit/
overQuotaWeight and parentQueue, PodGroups with minMember/queue/priorityClassName, subgroups, topologies)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from deploy_support import Installed, Kubectl


@pytest.fixture
def suffix() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def cluster_objects(installed_base: Installed) -> Iterator[list[tuple[str, str]]]:
    """Cluster-scoped objects a test created, as (kind, name); deleted afterwards."""
    created: list[tuple[str, str]] = []
    yield created
    for kind, name in reversed(created):
        installed_base.kube.run("delete", kind, name, "--ignore-not-found", "--wait=false", check=False)


def create(kube: Kubectl, manifest: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """`kubectl create` (strict validation) and read back what the apiserver stored."""
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    args = ["create", "--validate=strict", "-o", "json", "-f", "-"]
    if namespace:
        args[1:1] = ["-n", namespace]
    out = kube.run(*args, stdin=manifest).stdout
    decoder, stored, pos = json.JSONDecoder(), [], 0
    while pos < len(out.rstrip()):
        obj, end = decoder.raw_decode(out, pos)
        stored.extend(obj["items"] if obj.get("kind") == "List" else [obj])
        pos = end
        while pos < len(out) and out[pos].isspace():
            pos += 1
    assert len(stored) == len(docs), out
    return stored


def rejected(kube: Kubectl, manifest: str, namespace: str | None = None) -> str:
    args = ["create", "--validate=strict", "-f", "-"] + (["-n", namespace] if namespace else [])
    proc = kube.run(*args, stdin=manifest, check=False)
    assert proc.returncode != 0, f"accepted an invalid manifest:\n{manifest}"
    return proc.stderr


def test_kai_queue_hierarchy_applies_unchanged(installed_base: Installed, suffix: str,
                                               cluster_objects: list[tuple[str, str]]) -> None:
    manifest = f"""
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: research-{suffix}
spec:
  displayName: "Research Team"
  resources:
    cpu:
      quota: 2000
      overQuotaWeight: 1
      limit: 4000
    memory:
      quota: 4096
      overQuotaWeight: 1
      limit: 8192
    gpu:
      quota: 2
      overQuotaWeight: 1
      limit: 4
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: ml-{suffix}
spec:
  displayName: "ML Team"
  parentQueue: research-{suffix}
  priority: 200
  preemptMinRuntime: 5m
  reclaimMinRuntime: 1h30m
  resources:
    cpu:
      quota: 500
      overQuotaWeight: 2
    gpu:
      quota: 1.5
      overQuotaWeight: 1
      limit: -1
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: burst-{suffix}
spec:
  resources:
    cpu:
      quota: -1
      limit: -1
    gpu:
      quota: 0
      limit: -1
"""
    sent = [d for d in yaml.safe_load_all(manifest) if d]
    cluster_objects.extend(("queue", d["metadata"]["name"]) for d in sent)
    stored = create(installed_base.kube, manifest)
    assert [s["spec"] for s in stored] == [d["spec"] for d in sent]
    listed = installed_base.kube.run("get", "queues", f"ml-{suffix}").stdout
    assert "ML Team" in listed and f"research-{suffix}" in listed


def test_kai_podgroups_apply_unchanged(installed_base: Installed, namespace: str, suffix: str,
                                       cluster_objects: list[tuple[str, str]]) -> None:
    manifest = f"""
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata:
  name: distributed-training
spec:
  minMember: 4
  queue: ml-{suffix}
  priorityClassName: train
---
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata:
  name: inference-server
spec:
  minMember: 1
  queue: ml-{suffix}
  priorityClassName: inference
  preemptibility: preemptible
  markUnschedulable: true
  schedulingBackoff: 1
  preemptionDelay: 10m
  stalenessGracePeriod: 60s
---
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata:
  name: disaggregated
spec:
  queue: ml-{suffix}
  priorityClassName: build
  minSubGroup: 2
  topologyConstraint:
    topology: cluster-topology-{suffix}
    requiredTopologyLevel: zone
  subGroups:
    - name: decode
      minSubGroup: 1
      topologyConstraint:
        topology: cluster-topology-{suffix}
        preferredTopologyLevel: rack
    - name: decode-leaders
      parent: decode
      minMember: 1
    - name: decode-workers
      parent: decode
      minMember: 4
    - name: prefill
      minMember: 2
---
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata:
  name: legacy-fields
spec:
  minMember: 2
  queue: ml-{suffix}
  parallelism: 2
  completions: 2
  backoffLimit: 3
"""
    sent = [d for d in yaml.safe_load_all(manifest) if d]
    stored = create(installed_base.kube, manifest, namespace)
    assert [s["spec"] for s in stored] == [d["spec"] for d in sent]
    topology = f"""
apiVersion: kai.scheduler/v1alpha1
kind: Topology
metadata:
  name: cluster-topology-{suffix}
spec:
  levels:
    - nodeLabel: topology.kubernetes.io/zone
      alias: zone
    - nodeLabel: cloud.provider.com/topology-rack
      alias: rack
    - nodeLabel: kubernetes.io/hostname
"""
    cluster_objects.append(("topology", f"cluster-topology-{suffix}"))
    [stored_topology] = create(installed_base.kube, topology)
    assert stored_topology["spec"] == yaml.safe_load(topology)["spec"]


def test_status_subresources_accept_what_shoal_writes(installed_base: Installed, namespace: str) -> None:
    kube = installed_base.kube
    create(kube, "apiVersion: scheduling.run.ai/v2alpha2\nkind: PodGroup\nmetadata: {name: st}\n"
                 "spec: {minMember: 2, queue: q, priorityClassName: train}\n", namespace)
    status = {"status": {"schedulingConditions": [{
        "type": "UnschedulableOnNodePool", "nodePool": "default", "reason": "Unschedulable", "status": "True",
        "message": "OverLimit: q quota has reached the allowable limit of GPUs.", "transitionID": "1",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "reasons": [{"reason": "OverLimit", "message": "...", "details": {"queueDetails": {
            "name": "q", "queueResourceLimits": {"nvidia.com/gpu": "4"}, "queueFairShareResources": {"cpu": "2"}}}}],
    }], "resourcesStatus": {"allocated": {"nvidia.com/gpu": "2", "cpu": "500m"}}}}
    kube.run("patch", "podgroup", "st", "-n", namespace, "--subresource=status", "--type=merge",
             "-p", json.dumps(status))
    got = kube.json("get", "podgroup", "st", "-n", namespace)
    assert got["status"] == status["status"]
    header, row = kube.run("get", "podgroup", "st", "-n", namespace).stdout.splitlines()[:2]
    assert dict(zip(header.split(), row.split(), strict=True))["UNSCHEDULABLE"] == "OverLimit"


def test_invalid_podgroups_are_rejected_clearly(installed_base: Installed, namespace: str) -> None:
    kube = installed_base.kube
    head = "apiVersion: scheduling.run.ai/v2alpha2\nkind: PodGroup\nmetadata: {name: bad}\n"
    err = rejected(kube, head + "spec: {minMember: 2, minSubGroup: 1, queue: q}\n", namespace)
    assert "minMember and minSubGroup are mutually exclusive" in err
    err = rejected(kube, head + "spec: {minMember: 2, queue: q, preemptibility: sometimes}\n", namespace)
    assert 'spec.preemptibility: Unsupported value: "sometimes"' in err  # semi-preemptible is valid (KAI v0.18)
    assert '"preemptible", "non-preemptible", "semi-preemptible"' in err
    err = rejected(kube, head + "spec: {minMember: -1, queue: q}\n", namespace)
    assert "spec.minMember" in err and "greater than or equal to 0" in err
    err = rejected(kube, head + "spec:\n  queue: q\n  subGroups:\n  - {name: a, minMember: 1}\n"
                   "  - {name: a, minMember: 2}\n", namespace)
    assert "Duplicate value" in err
    err = rejected(kube, head + "spec:\n  queue: q\n  subGroups:\n  - {name: w, parent: nowhere, minMember: 1}\n",
                   namespace)
    assert "every subGroup parent must name another subGroup" in err
    err = rejected(kube, head + "spec:\n  queue: q\n  subGroups:\n  - {name: leaf, minSubGroup: 1}\n", namespace)
    assert "a leaf subGroup" in err and "must set minMember" in err
    err = rejected(kube, head + "spec:\n  queue: q\n  subGroups:\n  - {name: mid, minMember: 2}\n"
                   "  - {name: kid, parent: mid, minMember: 1}\n", namespace)
    assert "must not set minMember" in err
    err = rejected(kube, head + "spec: {minMember: 1, queue: q, stalenessGracePeriod: soon}\n", namespace)
    assert "spec.stalenessGracePeriod" in err


def test_invalid_topologies_and_queues_are_rejected(installed_base: Installed, suffix: str,
                                                    cluster_objects: list[tuple[str, str]]) -> None:
    kube = installed_base.kube
    head = f"apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {{name: t-{suffix}}}\n"
    err = rejected(kube, head + "spec:\n  levels:\n  - {nodeLabel: kubernetes.io/hostname}\n"
                   "  - {nodeLabel: rack}\n")
    assert "kubernetes.io/hostname label can only be used at the lowest level" in err
    err = rejected(kube, head + "spec:\n  levels:\n  - {nodeLabel: rack}\n  - {nodeLabel: rack}\n")
    assert "each level must use a different nodeLabel" in err
    err = rejected(kube, head + "spec: {levels: []}\n")
    assert "spec.levels" in err
    cluster_objects.append(("topology", f"t-{suffix}"))
    create(kube, head + "spec:\n  levels:\n  - {nodeLabel: zone, alias: z}\n  - {nodeLabel: rack}\n")
    proc = kube.run("patch", "topology", f"t-{suffix}", "--type=json", "-p",
                    '[{"op": "replace", "path": "/spec/levels/1/nodeLabel", "value": "row"}]', check=False)
    assert proc.returncode != 0 and "nodeLabel of each level is immutable" in proc.stderr
    kube.run("patch", "topology", f"t-{suffix}", "--type=json", "-p",
             '[{"op": "replace", "path": "/spec/levels/0/alias", "value": "zone"}]')
    err = rejected(kube, f"apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {{name: q-{suffix}}}\n"
                   "spec: {resources: {gpu: {quota: 1, limit: 2, weight: 1}}}\n")
    assert 'unknown field "spec.resources.gpu.weight"' in err

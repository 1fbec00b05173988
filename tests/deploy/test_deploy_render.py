"""The kustomize overlays render, and what they render keeps the deployment contract: KAI-compatible CRDs,
priority classes, one least-privilege account per service, hardened Deployments with health probes, the
shared ConfigMap/Secret, webhooks with certificates, in-cluster Kafka/Redis for dev and external ones for prod.
No cluster is needed here (kubectl kustomize runs offline)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from deploy_support import NODE_NS, REPO, SERVICES, SYSTEM_NS, service_namespace

Docs = list[dict[str, Any]]


def by_kind(docs: Docs, kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def workloads(docs: Docs) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs
            if d["kind"] in ("Deployment", "DaemonSet") and d["metadata"]["name"].startswith("shoal-")}


def test_crds_are_generated_from_their_sources() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "deploy/tools/gen_crds.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("overlay", ["base", "dev", "prod"])
def test_overlay_renders_every_service(rendered: dict[str, Docs], overlay: str) -> None:
    docs = rendered[overlay]
    work = workloads(docs)
    assert set(work) == {f"shoal-{s}" for s in SERVICES}
    assert work["shoal-nodeagent"]["kind"] == "DaemonSet"
    crds = by_kind(docs, "CustomResourceDefinition")
    assert set(crds) == {"queues.scheduling.run.ai", "podgroups.scheduling.run.ai", "topologies.kai.scheduler"}
    assert set(by_kind(docs, "Namespace")) == {SYSTEM_NS, NODE_NS, "kai-resource-reservation"}
    for name, workload in work.items():
        assert workload["metadata"]["namespace"] == service_namespace(name.removeprefix("shoal-")), name


@pytest.mark.parametrize("overlay", ["base", "dev", "prod"])
def test_only_the_node_agent_runs_in_the_privileged_namespace(rendered: dict[str, Docs], overlay: str) -> None:
    """shoal-system enforces `restricted`; shoal-node enforces `privileged` (audit still records what
    `restricted` would refuse) and holds nothing but the node agent, its account and its settings."""
    docs = rendered[overlay]
    labels = {n: ns["metadata"]["labels"] for n, ns in by_kind(docs, "Namespace").items()}
    psa = "pod-security.kubernetes.io/"
    assert (labels[SYSTEM_NS][psa + "enforce"], labels[SYSTEM_NS][psa + "warn"]) == ("restricted", "restricted")
    assert labels[NODE_NS][psa + "enforce"] == "privileged"
    assert labels[NODE_NS][psa + "audit"] == "restricted"
    in_node_ns = sorted((d["kind"], d["metadata"]["name"]) for d in docs
                        if d["metadata"].get("namespace") == NODE_NS)
    assert in_node_ns == [("ConfigMap", "shoal-config"), ("DaemonSet", "shoal-nodeagent"),
                          *([("Secret", "shoal-credentials")] if overlay == "dev" else []),
                          ("ServiceAccount", "shoal-nodeagent")]


def test_crds_match_kai_groups_versions_scopes(rendered: dict[str, Docs]) -> None:
    crds = by_kind(rendered["base"], "CustomResourceDefinition")
    expect = {
        "queues.scheduling.run.ai": ("scheduling.run.ai", "v2", "Cluster", "Queue"),
        "podgroups.scheduling.run.ai": ("scheduling.run.ai", "v2alpha2", "Namespaced", "PodGroup"),
        "topologies.kai.scheduler": ("kai.scheduler", "v1alpha1", "Cluster", "Topology"),
    }
    for name, (group, version, scope, kind) in expect.items():
        spec = crds[name]["spec"]
        assert (spec["group"], spec["scope"], spec["names"]["kind"]) == (group, scope, kind)
        [v] = spec["versions"]
        assert (v["name"], v["served"], v["storage"]) == (version, True, True)
        assert v["subresources"] == {"status": {}}
        assert v["additionalPrinterColumns"], f"{name} has no printer columns"


def _props(crds: dict[str, Any], name: str) -> dict[str, Any]:
    return crds[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]


def test_crd_fields_cover_kai_api(rendered: dict[str, Docs]) -> None:
    crds = by_kind(rendered["base"], "CustomResourceDefinition")
    queue = _props(crds, "queues.scheduling.run.ai")
    assert {"displayName", "parentQueue", "priority", "preemptMinRuntime", "reclaimMinRuntime",
            "resources"} <= set(queue["spec"]["properties"])
    for res in ("gpu", "cpu", "memory"):
        fields = queue["spec"]["properties"]["resources"]["properties"][res]["properties"]
        assert {k: v["type"] for k, v in fields.items()} == {"quota": "number", "limit": "number",
                                                             "overQuotaWeight": "number"}
    assert {"conditions", "childQueues", "allocated", "allocatedNonPreemptible", "requested"} <= set(
        queue["status"]["properties"])

    pg = _props(crds, "podgroups.scheduling.run.ai")
    spec = pg["spec"]["properties"]
    assert {"minMember", "minSubGroup", "queue", "priorityClassName", "preemptibility", "markUnschedulable",
            "schedulingBackoff", "topologyConstraint", "subGroups", "preemptionDelay",
            "stalenessGracePeriod"} <= set(spec)
    assert spec["preemptibility"]["enum"] == ["preemptible", "non-preemptible", "semi-preemptible"]
    assert spec["minMember"]["minimum"] == 0 and spec["minSubGroup"]["minimum"] == 0
    assert {"name", "minMember", "minSubGroup", "parent", "topologyConstraint"} <= set(
        spec["subGroups"]["items"]["properties"])
    assert {"schedulingConditions", "resourcesStatus", "conditions", "schedulingState"} <= set(pg["status"]["properties"])
    rules = [r["rule"] for r in pg["spec"]["x-kubernetes-validations"]]
    assert any("minMember" in r and "minSubGroup" in r for r in rules)

    topo = _props(crds, "topologies.kai.scheduler")
    levels = topo["spec"]["properties"]["levels"]
    assert (levels["minItems"], levels["maxItems"]) == (1, 16)
    assert set(levels["items"]["properties"]) == {"nodeLabel", "alias"}


def test_priority_classes_as_kai(rendered: dict[str, Docs]) -> None:
    pcs = by_kind(rendered["base"], "PriorityClass")
    assert {n: pc["value"] for n, pc in pcs.items()} == {"train": 50, "build-preemptible": 75, "build": 100,
                                                        "inference": 125}
    assert not any(pc.get("globalDefault") for pc in pcs.values())


@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_workloads_are_hardened_and_probed(rendered: dict[str, Docs], overlay: str) -> None:
    for name, work in workloads(rendered[overlay]).items():
        service = name.removeprefix("shoal-")
        pod = work["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        [c] = pod["containers"]
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert "privileged" not in c["securityContext"]
        assert not pod.get("hostNetwork") and not pod.get("hostIPC")
        assert not any("hostPath" in v for v in pod.get("volumes", [])), f"{name} mounts a host path"
        if not (service == "nodeagent" and overlay == "prod"):  # its privileges: test_node_agent_privileges
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["runAsUser"] != 0
            assert not pod.get("hostPID"), f"{name} shares the host's PID namespace"
            assert not c["securityContext"]["capabilities"].get("add"), f"{name} adds capabilities"
        assert c["image"].split("/")[-1].split(":")[0] == name
        assert not c["image"].endswith(":latest")
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports["http"] == 8080
        assert (c["livenessProbe"]["httpGet"]["path"], c["livenessProbe"]["httpGet"]["port"]) == ("/healthz", "http")
        assert (c["readinessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["port"]) == ("/readyz", "http")
        refs = [e.get("configMapRef", e.get("secretRef"))["name"] for e in c["envFrom"]]
        assert refs == ["shoal-config", "shoal-credentials"]
        assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
        no_api = service in ("fairshare", "planner")
        assert (pod.get("automountServiceAccountToken") is False) == no_api


def system_config(docs: Docs) -> dict[str, str]:
    [config] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "shoal-config"
                and d["metadata"]["namespace"] == SYSTEM_NS]
    return config["data"]


def test_config_names_the_shared_settings(rendered: dict[str, Docs]) -> None:
    for overlay in ("dev", "prod"):
        data = system_config(rendered[overlay])
        assert data["SHOAL_SCHEDULER_NAME"] == "shoal-scheduler"
        assert data["SHOAL_RESERVATION_NAMESPACE"] == "kai-resource-reservation"
        assert data["SHOAL_KAFKA_BOOTSTRAP"] and data["SHOAL_REDIS_URL"]
        assert not any("PASSWORD" in key for key in data), "passwords belong in shoal-credentials"
    prod = system_config(rendered["prod"])
    assert prod["SHOAL_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL" and prod["SHOAL_REDIS_URL"].startswith("rediss://")
    assert "shoal-credentials" in by_kind(rendered["dev"], "Secret")
    assert "shoal-credentials" not in by_kind(rendered["prod"], "Secret"), "prod secrets are created out of band"


def test_dev_runs_kafka_kraft_and_redis_in_cluster(rendered: dict[str, Docs]) -> None:
    deps = by_kind(rendered["dev"], "Deployment")
    kafka = deps["kafka"]["spec"]["template"]["spec"]["containers"][0]
    assert kafka["image"].startswith("apache/kafka:") and not kafka["image"].endswith(":latest")
    env = {e["name"]: e.get("value") for e in kafka["env"]}
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@localhost:9093"
    assert "kafka.shoal-system.svc:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert deps["kafka"]["spec"]["template"]["spec"]["enableServiceLinks"] is False
    assert deps["redis"]["spec"]["template"]["spec"]["containers"][0]["image"].startswith("redis:")
    assert {"kafka", "redis", "shoal-api", "shoal-admission"} <= set(by_kind(rendered["dev"], "Service"))
    assert "kafka" not in deps or "kafka" not in by_kind(rendered["prod"], "Deployment")
    assert not {"kafka", "redis"} & set(by_kind(rendered["prod"], "Deployment"))


def test_webhooks_and_certificates(rendered: dict[str, Docs]) -> None:
    for overlay in ("dev", "prod"):
        docs = rendered[overlay]
        mutating = by_kind(docs, "MutatingWebhookConfiguration")["shoal-admission"]
        validating = by_kind(docs, "ValidatingWebhookConfiguration")["shoal-admission"]
        paths = {w["clientConfig"]["service"]["path"] for w in mutating["webhooks"] + validating["webhooks"]}
        assert paths == {"/mutate-pods", "/validate-pods", "/validate-queues", "/validate-podgroups"}
        for hook in mutating["webhooks"] + validating["webhooks"]:
            assert hook["clientConfig"]["service"]["name"] == "shoal-admission"
            assert hook["sideEffects"] == "None"
        queue_hook = next(w for w in validating["webhooks"] if w["name"].startswith("queues."))
        assert queue_hook["rules"][0]["resources"] == ["queues"]
        assert set(queue_hook["rules"][0]["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    prod = rendered["prod"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        ann = by_kind(prod, kind)["shoal-admission"]["metadata"]["annotations"]
        assert ann["cert-manager.io/inject-ca-from"] == "shoal-system/shoal-admission"
    cert = by_kind(prod, "Certificate")["shoal-admission"]
    assert cert["spec"]["secretName"] == "shoal-admission-tls"
    assert "shoal-admission.shoal-system.svc" in cert["spec"]["dnsNames"]
    job = by_kind(rendered["dev"], "Job")["shoal-admission-certgen"]
    pod = job["spec"]["template"]["spec"]
    assert [c["args"][0] for c in pod["initContainers"] + pod["containers"]] == ["create", "patch"]
    assert "--webhook-name=shoal-admission" in pod["containers"][0]["args"]


def test_prod_scales_out(rendered: dict[str, Docs]) -> None:
    prod = by_kind(rendered["prod"], "Deployment")
    assert prod["shoal-planner"]["spec"]["replicas"] > 1
    assert prod["shoal-binder"]["spec"]["replicas"] > 1
    assert prod["shoal-admission"]["spec"]["replicas"] >= 2
    assert prod["shoal-snapshotter"]["spec"]["replicas"] == 1
    assert {"shoal-admission", "shoal-planner", "shoal-binder"} <= set(by_kind(rendered["prod"], "PodDisruptionBudget"))


def test_node_agent_privileges(rendered: dict[str, Docs]) -> None:
    """The deployed agent can police GPU memory in other pods (SPEC 2.6) and can do nothing more: host PID
    namespace to see their processes; uid 0 because Kubernetes gives added capabilities to root only; KILL to
    signal them; SYS_PTRACE + DAC_READ_SEARCH to read their /proc/<pid>/environ (mode 0400, another uid)."""
    for overlay in ("base", "prod"):
        agent = workloads(rendered[overlay])["shoal-nodeagent"]
        pod = agent["spec"]["template"]["spec"]
        [c] = pod["containers"]
        assert agent["metadata"]["namespace"] == NODE_NS
        assert pod["hostPID"] is True
        assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsNonRoot"]) == (0, False)
        sc = c["securityContext"]
        assert sc["capabilities"] == {"drop": ["ALL"], "add": ["KILL", "SYS_PTRACE", "DAC_READ_SEARCH"]}
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # dev (fake GPUs, simulated processes): the same namespace, none of the privileges
    pod = workloads(rendered["dev"])["shoal-nodeagent"]["spec"]["template"]["spec"]
    assert pod["hostPID"] is False and pod["securityContext"]["runAsUser"] == 10001


@pytest.mark.parametrize("overlay", ["base", "dev", "prod"])
def test_node_agent_reads_the_same_settings_in_its_namespace(rendered: dict[str, Docs], overlay: str) -> None:
    """envFrom cannot cross namespaces: shoal-node has its own shoal-config, copied from shoal-system's after
    the overlay's patches, so the binder and the node agent share one reservation namespace and scheduler
    name (SPEC 2.8) and the agent serves its probes on 0.0.0.0."""
    docs = rendered[overlay]
    configs = {d["metadata"]["namespace"]: d["data"] for d in docs
               if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "shoal-config"}
    assert configs[NODE_NS] == configs[SYSTEM_NS]
    assert configs[NODE_NS]["SHOAL_HTTP_HOST"] == "0.0.0.0"
    secrets = {d["metadata"]["namespace"]: d.get("data") or {} for d in docs
               if d["kind"] == "Secret" and d["metadata"]["name"] == "shoal-credentials"}
    if overlay == "dev":
        assert "SHOAL_REDIS_PASSWORD" in secrets[SYSTEM_NS]
        assert secrets[NODE_NS] == {}, "the node agent uses no Redis and dev Kafka has no password"
    else:
        assert secrets == {}, "created out of band (docs/deploy.md)"


@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_webhook_failure_policies(rendered: dict[str, Docs], overlay: str) -> None:
    """Mutation (runtimeClassName injection) fails open, so a webhook outage never blocks a pod for the sake
    of an optional field; validation fails closed, so no bad fraction annotation or queue gets through."""
    docs = rendered[overlay]
    mutating = by_kind(docs, "MutatingWebhookConfiguration")["shoal-admission"]["webhooks"]
    validating = by_kind(docs, "ValidatingWebhookConfiguration")["shoal-admission"]["webhooks"]
    assert {w["name"]: w["failurePolicy"] for w in mutating} == {"pods.mutate.shoal.io": "Ignore"}
    assert {w["name"]: w["failurePolicy"] for w in validating} == {"pods.validate.shoal.io": "Fail",
                                                                   "queues.validate.shoal.io": "Fail",
                                                                   "podgroups.validate.shoal.io": "Fail"}


SETTINGS = {
    "snapshotter": ("services.snapshotter.app", "SnapshotterSettings"),
    "podgrouper": ("services.podgrouper.app", "PodGrouperSettings"),
    "fairshare": ("services.fairshare.app", "FairShareSettings"),
    "planner": ("services.planner.app", "PlannerSettings"),
    "binder": ("services.binder.app", "BinderSettings"),
    "nodeagent": ("services.nodeagent.config", "NodeAgentSettings"),
    "admission": ("services.admission.app", "AdmissionSettings"),
    "api": ("services.api.app", "ApiSettings"),
}


@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_rendered_environment_loads_as_each_services_settings(rendered: dict[str, Docs], overlay: str) -> None:
    """What a pod's environment holds (ConfigMap + Secret + its literal env) is valid for that service's own
    settings class: a wrong key or value here would make the pod exit 2 at start."""
    import base64
    import importlib

    from shoal.settings import load_settings

    docs = rendered[overlay]
    for name, work in workloads(docs).items():
        service = name.removeprefix("shoal-")
        ns = work["metadata"]["namespace"]  # envFrom reads the ConfigMap and Secret of the pod's namespace
        [config] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "shoal-config"
                    and d["metadata"]["namespace"] == ns]
        env = dict(config["data"])
        secrets = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "shoal-credentials"
                   and d["metadata"]["namespace"] == ns]
        if overlay == "dev":
            [secret] = secrets
            env.update({k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()})
        else:  # prod: created out of band with these keys (docs/deploy.md); shoal-node's without Redis
            assert secrets == []
            env["SHOAL_KAFKA_SASL_PASSWORD"] = "secret"
            if ns == SYSTEM_NS:
                env["SHOAL_REDIS_PASSWORD"] = "secret"
        module, cls = SETTINGS[service]
        [c] = work["spec"]["template"]["spec"]["containers"]
        pod_env = env | {e["name"]: e.get("value", f"{service}-from-field") for e in c.get("env", [])}
        settings = load_settings(getattr(importlib.import_module(module), cls), pod_env)
        assert settings.kube.in_cluster and settings.http.host == "0.0.0.0" and settings.http.port == 8080
        assert settings.kafka.bootstrap == env["SHOAL_KAFKA_BOOTSTRAP"]
        if service == "nodeagent":
            assert settings.backend == ("fake" if overlay == "dev" else "nvml")
        if service == "binder":
            assert settings.reservation_namespace == "kai-resource-reservation"
        if service == "admission":
            assert settings.webhook.tls_cert_file == "/etc/shoal/tls/tls.crt"
        if service == "api":  # callers' tokens and RBAC checked in every overlay (docs/security.md)
            assert settings.api_auth == "kubernetes"

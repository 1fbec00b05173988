"""Shoal installed the way users install it, and scheduling from inside the cluster (issue: deploy for real).

The eight images are built from docker/Dockerfile and pushed to a local registry; deploy/k8s/overlays/dev is
applied with `kubectl apply -k` (an overlay of ours only names the images: Shoal's by digest, the dev
overlay's third-party ones by local stand-ins) onto the real node (kubelet + containerd). Then: every
Deployment and the node agent DaemonSet Ready under their own ServiceAccounts, Kafka and Redis in-cluster,
the admission webhook answering through its Service, a gang and a fractional pod scheduled by the in-cluster
Shoal (the fractional container sees its GPU's UUID), and a burst through two binder replicas while the
planner's pod is deleted: every pod bound, no GPU booked twice, one reservation pod per shared GPU.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from e2e_helpers import eventually
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from shoal.devstack import incluster, realnode
from shoal.devstack.registry import stack_registry

pytestmark = [pytest.mark.stack, pytest.mark.timeout(1500)]

NODE = "real-node-1"
RESERVATIONS = "kai-resource-reservation"
GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def installed(real_node_stack: Any) -> Any:
    """Shoal deployed into the real-node stack's cluster, removed afterwards (the registry is the stack's)."""
    state = Path(real_node_stack.state_dir)
    overlay = state / "incluster"
    try:
        registry = stack_registry(state, tie_to_parent=True)
        realnode.trust_registry(state, registry)
        images = incluster.publish(registry)
        incluster.write_overlay(overlay, images, {"SHOAL_RESERVATION_IMAGE": realnode.PAUSE_IMAGE})
        incluster.apply(real_node_stack.kubeconfig, overlay)
        incluster.wait_ready(real_node_stack.kubeconfig)
        yield real_node_stack
    finally:
        if (overlay / "kustomization.yaml").is_file():
            incluster.remove(real_node_stack.kubeconfig, overlay)


@pytest_asyncio.fixture
async def core(installed: Any) -> Any:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=installed.kubeconfig, client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        yield api


def kubectl(stack: Any, *args: str) -> str:
    return incluster.kubectl(stack.kubeconfig, *args)


def probe_pod(name: str, *, queue: str, annotations: dict | None = None, gpus: int = 0,
              labels: dict | None = None) -> dict:
    """A pod for Shoal that prints its GPU env (a static binary in a scratch image, already on the node)."""
    return {
        "metadata": {"name": name, "annotations": annotations or {},
                     "labels": {"kai.scheduler/queue": queue, **(labels or {})}},
        "spec": {"schedulerName": "shoal-scheduler", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": realnode.PROBE_IMAGE, "imagePullPolicy": "Never",
                                 "args": ["env", "NVIDIA_VISIBLE_DEVICES", "GPU_PORTION"],
                                 "resources": {"limits": {GPU: str(gpus)}} if gpus else {}}]}}


async def make_queues(api: Any, name: str, gpus: int) -> None:
    custom = client.CustomObjectsApi(api)
    for queue, parent in ((f"{name}-dept", None), (name, f"{name}-dept")):
        spec: dict = {"resources": {"gpu": {"quota": gpus, "limit": -1, "overQuotaWeight": 1},
                                    "cpu": {"quota": -1, "limit": -1}, "memory": {"quota": -1, "limit": -1}}}
        if parent:
            spec["parentQueue"] = parent
        await custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", {
            "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": queue}, "spec": spec})


async def namespace(api: Any, name: str) -> None:
    v1 = client.CoreV1Api(api)
    await v1.create_namespace({"metadata": {"name": name}})

    async def account() -> bool:
        return bool((await v1.list_namespaced_service_account(name)).items)

    await eventually(account, timeout_s=30, what=f"the default ServiceAccount of {name}")


async def running(api: Any, ns: str, names: list[str], timeout_s: float = 180) -> list[Any]:
    v1 = client.CoreV1Api(api)

    async def check() -> list[Any] | None:
        pods = [await v1.read_namespaced_pod(n, ns) for n in names]
        return pods if all(p.status.phase == "Running" for p in pods) else None

    return await eventually(check, timeout_s=timeout_s, interval_s=1, what=f"{len(names)} pods Running in {ns}")


async def test_every_service_runs_in_cluster_under_its_own_account(installed: Any, core: Any) -> None:
    apps = client.AppsV1Api(core)
    v1 = client.CoreV1Api(core)
    deployments = {d.metadata.name: d for d in (await apps.list_namespaced_deployment("shoal-system")).items}
    services = {"shoal-snapshotter", "shoal-podgrouper", "shoal-fairshare", "shoal-planner", "shoal-binder",
                "shoal-admission", "shoal-api"}
    assert services | {"kafka", "redis"} <= set(deployments), sorted(deployments)
    for name in services:
        d = deployments[name]
        assert d.status.ready_replicas == d.spec.replicas, name
        pods = (await v1.list_namespaced_pod("shoal-system", label_selector=",".join(
            f"{k}={v}" for k, v in d.spec.selector.match_labels.items()))).items
        assert pods and all(p.spec.node_name == NODE for p in pods), name
        assert {p.spec.service_account_name for p in pods} == {d.spec.template.spec.service_account_name}, name
        assert d.spec.template.spec.service_account_name.startswith("shoal-"), name
        tokens = [v for p in pods for v in p.spec.volumes or [] if v.projected]
        wants_token = d.spec.template.spec.automount_service_account_token is not False
        assert bool(tokens) == wants_token, f"{name}: token mounted {bool(tokens)}, wanted {wants_token}"
    agent = await apps.read_namespaced_daemon_set("shoal-nodeagent", "shoal-node")
    assert agent.status.number_ready == agent.status.desired_number_scheduled >= 1
    # the webhook is served through its Service (the apiserver calls it; its certificate came from the Job)
    await namespace(core, "deny")
    with pytest.raises(ApiException) as denied:
        await v1.create_namespaced_pod("deny", probe_pod("bad", queue="none", annotations={"gpu-fraction": "1.5"}))
    assert "gpu-fraction annotation value must be a positive number smaller than 1.0" in denied.value.body


async def test_gang_and_fraction_scheduled_by_the_in_cluster_shoal(installed: Any, core: Any) -> None:
    v1 = client.CoreV1Api(core)
    await make_queues(core, "team-a", gpus=8)
    await namespace(core, "work")
    await client.CustomObjectsApi(core).create_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", "work", "podgroups", {
            "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "gang"},
            "spec": {"minMember": 3, "queue": "team-a"}})
    for i in range(3):
        await v1.create_namespaced_pod("work", probe_pod(f"gang-{i}", queue="team-a", gpus=1,
                                                         annotations={"pod-group-name": "gang"}))
    await v1.create_namespaced_pod("work", probe_pod("half", queue="team-a", annotations={"gpu-fraction": "0.5"}))
    pods = await running(core, "work", ["gang-0", "gang-1", "gang-2", "half"])
    assert {p.spec.node_name for p in pods} == {NODE}
    half = pods[-1]
    gpu_group = half.metadata.labels["runai-gpu-group"]
    reservations = (await v1.list_namespaced_pod(RESERVATIONS, label_selector=f"runai-gpu-group={gpu_group}")).items
    assert len(reservations) == 1 and reservations[0].spec.node_name == NODE
    uuid = reservations[0].metadata.annotations["run.ai/reserve_for_gpu_index"]
    assert uuid.startswith("GPU-")

    async def env_printed() -> str | None:
        log = await v1.read_namespaced_pod_log("half", "work")  # the container's own stdout, via the kubelet
        return log if "NVIDIA_VISIBLE_DEVICES=" in log else None

    log = await eventually(env_printed, timeout_s=30, what="the fractional container's env in its log")
    assert f"NVIDIA_VISIBLE_DEVICES={uuid}" in log and "GPU_PORTION=0.50" in log, log
    for i in range(3):
        assert "NVIDIA_VISIBLE_DEVICES unset" in await v1.read_namespaced_pod_log(f"gang-{i}", "work")
    for name in ("gang-0", "gang-1", "gang-2", "half"):
        await v1.delete_namespaced_pod(name, "work", grace_period_seconds=0)


async def test_burst_through_two_binders_while_the_planner_pod_is_deleted(installed: Any, core: Any) -> None:
    v1 = client.CoreV1Api(core)
    kubectl(installed, "-n", "shoal-system", "scale", "deployment/shoal-binder", "--replicas=2")
    kubectl(installed, "-n", "shoal-system", "rollout", "status", "deployment/shoal-binder", "--timeout=240s")
    await make_queues(core, "team-b", gpus=8)
    await namespace(core, "burst")

    async def gone() -> bool:  # the earlier test's GPUs are free again
        return not (await v1.list_namespaced_pod("work")).items

    await eventually(gone, timeout_s=60, what="the earlier pods to go")
    names = [f"whole-{i}" for i in range(4)] + [f"half-{i}" for i in range(6)]
    planner = json.loads(kubectl(installed, "-n", "shoal-system", "get", "pods", "-l",
                                 "app.kubernetes.io/component=planner", "-o", "json"))["items"]
    for i, name in enumerate(names):
        whole = name.startswith("whole")
        await v1.create_namespaced_pod("burst", probe_pod(
            name, queue="team-b", gpus=1 if whole else 0, annotations={} if whole else {"gpu-fraction": "0.5"}))
        if i == 3:  # mid-burst: the planner's pod goes; its Deployment makes a new one
            kubectl(installed, "-n", "shoal-system", "delete", "pod", planner[0]["metadata"]["name"], "--wait=false")
        await asyncio.sleep(0.2)
    pods = await running(core, "burst", names, timeout_s=300)
    assert {p.spec.node_name for p in pods} == {NODE}
    groups: dict[str, int] = {}
    for p in pods:
        if p.metadata.name.startswith("half"):
            groups[p.metadata.labels["runai-gpu-group"]] = groups.get(p.metadata.labels["runai-gpu-group"], 0) + 1
    assert all(count <= 2 for count in groups.values()), groups  # two halves at most per shared GPU
    reservations = (await v1.list_namespaced_pod(RESERVATIONS)).items
    per_group: dict[str, int] = {}
    for r in reservations:
        per_group[r.metadata.labels["runai-gpu-group"]] = per_group.get(r.metadata.labels["runai-gpu-group"], 0) + 1
    assert all(per_group.get(g) == 1 for g in groups), (groups, per_group)  # one reservation pod per shared GPU
    assert 4 + len(groups) <= 8, groups  # no GPU booked twice: whole GPUs plus shared ones fit the node
    binders = json.loads(kubectl(installed, "-n", "shoal-system", "get", "pods", "-l",
                                 "app.kubernetes.io/component=binder", "-o", "json"))["items"]
    assert len(binders) == 2

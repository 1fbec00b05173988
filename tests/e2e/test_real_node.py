"""A real node (kubelet + containerd) next to a fake one runs real pods: a ServiceAccount token, a ClusterIP
Service reached from a pod (by its *.svc name, through CoreDNS) and from the host, the `kubernetes` Service,
fake GPUs advertised and kept; the kube-scheduler never places a pod on the fake node. `down` leaving nothing
behind is checked by the `real_node_stack` fixture's teardown."""

from __future__ import annotations

import datetime as dt
import socket
from typing import Any

import pytest
from e2e_helpers import eventually
from kubernetes_asyncio import client, config

from shoal.devstack.nodes import GPU_RESOURCE, create_gpu_nodes
from shoal.devstack.realnode import PROBE_IMAGE

pytestmark = [pytest.mark.stack, pytest.mark.timeout(240)]


def probe_pod(name: str, args: list[str], labels: dict[str, str] | None = None, gpus: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "probe",
                    "image": PROBE_IMAGE,
                    "imagePullPolicy": "Never",
                    "args": args,
                    "resources": {"limits": {GPU_RESOURCE: str(gpus)}} if gpus else {},
                }
            ],
        },
    }


async def test_real_pods_reach_services_by_name(real_node_stack: Any) -> None:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=real_node_stack.kubeconfig, client_configuration=cfg)
    began = dt.datetime.now(dt.UTC)
    async with client.ApiClient(cfg) as api:
        core = client.CoreV1Api(api)
        await create_gpu_nodes(api, ["gpu-fake-1"], gpus=8)  # a fake node beside it: never chosen
        ns = "probe"
        await core.create_namespace({"metadata": {"name": ns}})
        await eventually(
            lambda: _default_service_account(core, ns), timeout_s=30, what="the default ServiceAccount"
        )
        await core.create_namespaced_pod(ns, probe_pod("srv", ["serve", "8080"], {"app": "srv"}, gpus=1))
        svc = await core.create_namespaced_service(
            ns, {"metadata": {"name": "srv"}, "spec": {"selector": {"app": "srv"}, "ports": [{"port": 80, "targetPort": 8080}]}}
        )
        await eventually(lambda: _phase(core, ns, "srv", "Running"), timeout_s=60, what="srv Running")
        targets = [f"srv.{ns}.svc.cluster.local:80", "kubernetes.default.svc.cluster.local:443"]
        await core.create_namespaced_pod(ns, probe_pod("cli", ["dial", *targets]))
        done = await eventually(
            lambda: _phase(core, ns, "cli", "Succeeded", "Failed"), timeout_s=60, what="cli finished"
        )
        log = await core.read_namespaced_pod_log("cli", ns)  # through the apiserver → kubelet
        assert done == "Succeeded", log
        assert "token mounted" in log
        assert "connected: hello from srv" in log
        assert "kubernetes.default.svc.cluster.local:443 (10.0.0.1): connected" in log

        # the host reaches the ClusterIP through kube-proxy's rules too
        with socket.create_connection((svc.spec.cluster_ip, 80), timeout=3) as conn:
            assert conn.recv(64).startswith(b"hello from srv")

        srv = await core.read_namespaced_pod("srv", ns)
        cli = await core.read_namespaced_pod("cli", ns)
        assert {srv.spec.node_name, cli.spec.node_name} == {"real-node-1"}
        assert any(v.projected for v in srv.spec.volumes), "no ServiceAccount token volume"
        node = await eventually(lambda: _heartbeat_after(core, "real-node-1", began), timeout_s=30,
                                what="a kubelet status update after the GPU patch")
        assert node.status.capacity[GPU_RESOURCE] == "8"
        assert node.status.allocatable[GPU_RESOURCE] == "8"
        assert node.metadata.labels["nvidia.com/gpu.count"] == "8"


async def _default_service_account(core: client.CoreV1Api, ns: str) -> bool:
    return bool((await core.list_namespaced_service_account(ns)).items)


async def _heartbeat_after(core: client.CoreV1Api, name: str, since: dt.datetime) -> Any:
    node = await core.read_node(name)
    ready = [c for c in node.status.conditions if c.type == "Ready"]
    return node if ready and ready[0].last_heartbeat_time > since else None


async def _phase(core: client.CoreV1Api, ns: str, name: str, *wanted: str) -> str | None:
    phase = (await core.read_namespaced_pod(name, ns)).status.phase
    return phase if phase in wanted else None

"""Fake GPU nodes: plain v1.Node objects with GPU capacity, KAI/NVIDIA labels and a Ready condition.

They carry the label `shoal.io/fake-node=true`; the fake kubelet plays the kubelet for pods bound to them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from shoal.core.kai_labels import NODE_POOL_LABEL

FAKE_NODE_LABEL = "shoal.io/fake-node"
GPU_RESOURCE = "nvidia.com/gpu"


def gpu_labels(gpus: int, gpu_memory_mib: int, gpu_product: str, pool: str) -> dict[str, str]:
    """The labels fake-gpu-operator (and NVIDIA's GPU feature discovery) put on a GPU node, and the pool."""
    return {
        NODE_POOL_LABEL: pool,
        "nvidia.com/gpu.present": "true" if gpus else "false",
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": str(gpu_memory_mib),
        "nvidia.com/gpu.product": gpu_product,
    }


def node_body(
    name: str,
    *,
    gpus: int = 8,
    gpu_memory_mib: int = 81920,
    gpu_product: str = "NVIDIA-A100-SXM4-80GB",
    cpu: str = "64",
    memory: str = "512Gi",
    pods: int = 110,
    pool: str = "default",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """The manifest of one fake node (also usable as `status`-patch source)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    resources = {
        "cpu": cpu,
        "memory": memory,
        "pods": str(pods),
        GPU_RESOURCE: str(gpus),
        "ephemeral-storage": "1Ti",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                FAKE_NODE_LABEL: "true",
                **gpu_labels(gpus, gpu_memory_mib, gpu_product, pool),
                **(labels or {}),
            },
        },
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake node managed by shoal.devstack",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v1.36.3-fake",
                "kubeProxyVersion": "",
                "containerRuntimeVersion": "fake://1",
                "kernelVersion": "",
                "osImage": "shoal fake node",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


async def create_gpu_nodes(
    api_client: client.ApiClient,
    names: Iterable[str],
    *,
    gpus: int = 8,
    gpu_memory_mib: int = 81920,
    gpu_product: str = "NVIDIA-A100-SXM4-80GB",
    cpu: str = "64",
    memory: str = "512Gi",
    pods: int = 110,
    pool: str = "default",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> list[str]:
    """Create (or replace the status of) fake GPU nodes named `names` in node pool `pool`; return the names.

    The apiserver keeps status sent at create; the status is patched through the status subresource anyway
    when it differs (e.g. the node already existed), so capacity and Ready are what was asked for.
    """
    core = client.CoreV1Api(api_client)
    kwargs = dict(
        gpus=gpus,
        gpu_memory_mib=gpu_memory_mib,
        gpu_product=gpu_product,
        cpu=cpu,
        memory=memory,
        pods=pods,
        pool=pool,
        labels=labels,
        taints=taints,
    )
    names = list(names)
    await asyncio.gather(*(_create_one(core, node_body(n, **kwargs)) for n in names))  # type: ignore[arg-type]
    return names


async def _create_one(core: client.CoreV1Api, body: dict[str, Any]) -> None:
    name = body["metadata"]["name"]
    try:
        created = await core.create_node(body, _preload_content=False)
        doc = await created.json()
        if created.status == 409:  # without preloading, the client returns a 409 instead of raising it
            raise ApiException(status=409, reason=str(doc.get("message", "AlreadyExists")))
        if created.status >= 300:
            raise ApiException(status=created.status, reason=str(doc.get("message", "")))
        kept = (doc.get("status") or {}).get("capacity") or {}
    except ApiException as exc:
        if exc.status != 409:
            raise
        await core.patch_node(
            name, {"metadata": {"labels": body["metadata"]["labels"]}, "spec": body["spec"]}
        )
        kept = {}
    if kept.get(GPU_RESOURCE) != body["status"]["capacity"][GPU_RESOURCE]:
        await core.patch_node_status(
            name, {"status": body["status"]}, _content_type="application/merge-patch+json"
        )


async def advertise_gpus(
    api_client: client.ApiClient,
    name: str,
    *,
    gpus: int = 8,
    gpu_memory_mib: int = 81920,
    gpu_product: str = "NVIDIA-A100-SXM4-80GB",
    pool: str = "default",
) -> None:
    """Make a node a kubelet runs look like a GPU node, the way fake-gpu-operator does: GPU labels, and
    `nvidia.com/gpu` in status capacity/allocatable. The kubelet keeps extended resources it does not manage
    (no device plugin registers nvidia.com/gpu here), so the status patch survives its status updates."""
    core = client.CoreV1Api(api_client)
    await core.patch_node(name, {"metadata": {"labels": gpu_labels(gpus, gpu_memory_mib, gpu_product, pool)}})
    count = {GPU_RESOURCE: str(gpus)}
    await core.patch_node_status(
        name,
        {"status": {"capacity": count, "allocatable": count}},
        _content_type="application/merge-patch+json",
    )


async def delete_nodes(api_client: client.ApiClient, names: Iterable[str]) -> None:
    """Delete nodes, ignoring ones already gone."""
    core = client.CoreV1Api(api_client)

    async def one(name: str) -> None:
        try:
            await core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    await asyncio.gather(*(one(n) for n in names))

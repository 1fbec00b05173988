"""KAI v0.18 GPU sharing modes and per-container GPU annotations on the real stack.

The session's services run with `SHOAL_POOL_GPU_SHARING_MODES` (tests/e2e/conftest.py): pool-k18b-nvf is
NvFractions, pool-k18b-hami HamiCore, pool-k18b-off Disabled; every other pool NonMemoryEnforced. The admission
webhook, planner, binder and node agent each read the same setting.
"""

from __future__ import annotations

from e2e_helpers import eventually

from shoal.adapters.kube import CONFIGMAPS, PODGROUPS, PODS
from shoal.errors import ShoalError

RESERVATION_NS = "kai-resource-reservation"
SM = "nvidia.com/container.main.gpu-compute.mode"
REQ = "nvidia.com/container.main.gpu-memory.request"
LIM = "nvidia.com/container.main.gpu-memory.limit"
DEVICES = "nvidia.com/container.main.gpus.devices"
RESERVATION_MODE = "nvidia.com/container.reservation.gpu-compute.mode"
NVF, HAMI, OFF = "pool-k18b-nvf", "pool-k18b-hami", "pool-k18b-off"
TIMEOUT_S = 150  # 2 shared cores: a shared GPU waits for its reservation pod and the node agent


def fraction_pod(namespace: str, name: str, queue: str, pool: str, annotations: dict, gpus: int = 0) -> dict:
    container: dict = {"name": "main", "image": "busybox"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations,
                         "labels": {"kai.scheduler/queue": queue, "kai.scheduler/node-pool": pool}},
            "spec": {"schedulerName": "shoal-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [container]}}


async def bound(kube, namespace: str, names: list[str]) -> list[dict]:
    async def check():
        pods = [await kube.get(PODS, n, namespace=namespace) for n in names]
        return pods if all(p["spec"].get("nodeName") for p in pods) else None

    return await eventually(check, timeout_s=TIMEOUT_S, what=f"pods {names} to be bound")


async def reservation_of(kube, group: str) -> dict:
    async def one():
        items, _ = await kube.list(PODS, namespace=RESERVATION_NS, label_selector=f"runai-gpu-group={group}")
        return items[0] if len(items) == 1 else None

    return await eventually(one, timeout_s=60, what=f"the reservation pod of {group}")


async def test_compute_modes_never_share_a_gpu(shoal, kube, namespace, queue, node_pool, gpu_nodes):
    """NonMemoryEnforced pool: time-slicing and sm-sharing fractions land on two GPUs, one mode each; the
    per-container request/limit pod is placed on its request."""
    await gpu_nodes(1, gpus=2, gpu_memory_mib=40960)
    specs = {"ts-a": {"gpu-fraction": "0.5"}, "ts-b": {REQ: "8Gi", LIM: "16Gi", SM: "time-slicing"},
             "sm-a": {"gpu-fraction": "0.3", SM: "sm-sharing"}, "sm-b": {"gpu-fraction": "0.3", SM: "sm-sharing"}}
    for name, notes_of in specs.items():
        await kube.create(PODS, fraction_pod(namespace, name, queue, node_pool, notes_of), namespace=namespace)
    pods = {p["metadata"]["name"]: p for p in await bound(kube, namespace, list(specs))}
    group = {n: p["metadata"]["labels"]["runai-gpu-group"] for n, p in pods.items()}
    assert group["ts-a"] == group["ts-b"] and group["sm-a"] == group["sm-b"], group
    assert group["ts-a"] != group["sm-a"], group
    sm_reservation = await reservation_of(kube, group["sm-a"])
    assert sm_reservation["metadata"]["annotations"][RESERVATION_MODE] == "sm-sharing"
    assert (await reservation_of(kube, group["ts-a"]))["metadata"]["annotations"][RESERVATION_MODE] == "time-slicing"
    uuids = {n: None for n in specs}
    configmaps, _ = await kube.list(CONFIGMAPS, namespace=namespace)
    for cm in configmaps:
        for name in specs:
            if cm["metadata"]["name"].startswith(f"{name}-") and not cm["metadata"]["name"].endswith("-evar"):
                uuids[name] = cm["data"]["NVIDIA_VISIBLE_DEVICES"]
                if name == "ts-b":
                    assert cm["data"]["GPU_PORTION"] == "0.20", cm["data"]  # 8Gi of 40Gi: placed on the request
    assert uuids["ts-a"] == uuids["ts-b"] != uuids["sm-a"] == uuids["sm-b"], uuids


async def test_nvfractions_passes_the_gpu_by_annotations(shoal, kube, namespace, queue, gpu_nodes):
    """NvFractions: admission turns gpu-memory into the per-container request, the binder writes the device list
    and (from a portion) the request annotation; no shared-GPU ConfigMap and no GPU env are used."""
    await gpu_nodes(1, pool=NVF, gpus=1, gpu_memory_mib=40960)
    specs = {"mem": {"gpu-memory": "10240"}, "dyn": {REQ: "8Gi", LIM: "16Gi"}, "half": {"gpu-fraction": "0.25"}}
    for name, notes_of in specs.items():
        await kube.create(PODS, fraction_pod(namespace, name, queue, NVF, notes_of), namespace=namespace)
    pods = {p["metadata"]["name"]: p for p in await bound(kube, namespace, list(specs))}
    notes = {n: p["metadata"]["annotations"] for n, p in pods.items()}
    assert notes["mem"][REQ] == "10240Mi"
    assert notes["half"][REQ] == "10240Mi"  # written by the binder: 0.25 of 40960 MiB
    assert notes["dyn"][REQ] == "8Gi" and notes["dyn"][LIM] == "16Gi"
    (group,) = {p["metadata"]["labels"]["runai-gpu-group"] for p in pods.values()}
    uuid = (await reservation_of(kube, group))["metadata"]["annotations"]["run.ai/reserve_for_gpu_index"]
    assert all(n[DEVICES] == uuid for n in notes.values()), notes
    assert all("runai/shared-gpu-configmap" not in n for n in notes.values())
    assert all(not p["spec"]["containers"][0].get("env") for p in pods.values())
    configmaps, _ = await kube.list(CONFIGMAPS, namespace=namespace)
    assert not [cm["metadata"]["name"] for cm in configmaps if cm["metadata"]["name"].startswith(tuple(specs))]


async def test_hamicore_sets_the_cuda_memory_limit(shoal, kube, namespace, queue, gpu_nodes):
    await gpu_nodes(1, pool=HAMI, gpus=1, gpu_memory_mib=40960)
    await kube.create(PODS, fraction_pod(namespace, "half", queue, HAMI, {"gpu-fraction": "0.5"}), namespace=namespace)
    (pod,) = await bound(kube, namespace, ["half"])
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    ref = env["CUDA_DEVICE_MEMORY_LIMIT"]["valueFrom"]["configMapKeyRef"]
    capabilities = await kube.get(CONFIGMAPS, ref["name"], namespace=namespace)
    assert capabilities["data"]["CUDA_DEVICE_MEMORY_LIMIT"] == "20480m"
    assert capabilities["data"]["GPU_PORTION"] == "0.50"


async def test_disabled_refuses_fractions_everywhere(shoal, kube, namespace, queue, node_pool, gpu_nodes):
    """Disabled: admission denies a fraction pod with KAI's text; one that slipped past admission (its pod moved
    into the pool afterwards) is reported unschedulable by the planner with the same text; whole GPUs run."""
    await gpu_nodes(1, pool=OFF, gpus=2, gpu_memory_mib=40960)
    try:
        await kube.create(PODS, fraction_pod(namespace, "half", queue, OFF, {REQ: "4Gi"}), namespace=namespace)
    except ShoalError as exc:
        assert f"attempting to create a pod {namespace}/half with gpu sharing request, while GPU sharing is " \
               "disabled" in str(exc), str(exc)
    else:
        raise AssertionError("a fraction pod was admitted into a Disabled pool")
    await kube.create(PODS, fraction_pod(namespace, "whole", queue, OFF, {}, gpus=1), namespace=namespace)
    # admitted in a pool without nodes (NonMemoryEnforced), then moved into the Disabled pool
    await kube.create(PODS, fraction_pod(namespace, "moved", queue, node_pool, {"gpu-fraction": "0.5"}),
                      namespace=namespace)

    async def its_group():
        items, _ = await kube.list(PODGROUPS, namespace=namespace)
        return [g for g in items if "moved" in g["metadata"]["name"]]

    (group,) = await eventually(its_group, timeout_s=60, what="the moved pod's PodGroup")
    pool_label = {"metadata": {"labels": {"kai.scheduler/node-pool": OFF}}}
    await kube.patch(PODGROUPS, group["metadata"]["name"], pool_label, namespace=namespace)
    await kube.patch(PODS, "moved", pool_label, namespace=namespace)
    await bound(kube, namespace, ["whole"])

    async def refused():
        current = await kube.get(PODGROUPS, group["metadata"]["name"], namespace=namespace)
        texts = [c.get("message", "") for c in (current.get("status") or {}).get("schedulingConditions") or []]
        return [t for t in texts if "while GPU sharing is disabled" in t]

    (message,) = await eventually(refused, timeout_s=TIMEOUT_S, what="the Disabled reason on the moved pod's group")
    assert f"attempting to create a pod {namespace}/moved with gpu sharing request" in message, message
    assert not (await kube.get(PODS, "moved", namespace=namespace))["spec"].get("nodeName")

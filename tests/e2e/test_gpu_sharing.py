"""GPU sharing end to end (reference S30, S34; seed 000 observation (d)): two `gpu-fraction: 0.5` pods share
one card through one reservation pod whose GPU UUID the node agent writes; both pods get the same
`runai-gpu-group` and NVIDIA_VISIBLE_DEVICES."""

from __future__ import annotations

from e2e_helpers import eventually

from shoal.adapters.kube import CONFIGMAPS, PODS

RESERVATION_NS = "kai-resource-reservation"


def half_pod(namespace: str, name: str, queue: str, pool: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": {"gpu-fraction": "0.5"},
                         "labels": {"kai.scheduler/queue": queue, "kai.scheduler/node-pool": pool}},
            "spec": {"schedulerName": "shoal-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox"}]}}


async def test_two_halves_share_one_card(shoal, kube, namespace, queue, node_pool, gpu_nodes):
    (node,) = await gpu_nodes(1, gpus=1, gpu_memory_mib=40960)
    for name in ("half-a", "half-b"):
        await kube.create(PODS, half_pod(namespace, name, queue, node_pool), namespace=namespace)

    async def both_bound():
        pods = [await kube.get(PODS, n, namespace=namespace) for n in ("half-a", "half-b")]
        return pods if all(p["spec"].get("nodeName") for p in pods) else None

    pods = await eventually(both_bound, timeout_s=120, what="both fractional pods to be bound")
    assert {p["spec"]["nodeName"] for p in pods} == {node}
    groups = {p["metadata"]["labels"].get("runai-gpu-group") for p in pods}
    assert len(groups) == 1 and None not in groups, groups
    (group,) = groups
    assert all(p["metadata"]["annotations"].get("received-resource-type") == "Fraction" for p in pods)

    reservations, _ = await kube.list(PODS, namespace=RESERVATION_NS, label_selector=f"runai-gpu-group={group}")
    assert len(reservations) == 1, "exactly one reservation pod per shared GPU"
    reservation = reservations[0]
    assert reservation["spec"]["nodeName"] == node
    limits = reservation["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1"}
    uuid = reservation["metadata"]["annotations"]["run.ai/reserve_for_gpu_index"]
    assert uuid.startswith("GPU-")

    configmaps, _ = await kube.list(CONFIGMAPS, namespace=namespace)
    ours = [cm for cm in configmaps if cm["metadata"]["name"].startswith(("half-a", "half-b"))]
    env = [cm["data"] for cm in ours if not cm["metadata"]["name"].endswith("-evar")]
    assert len(env) == 2 and len(ours) == 4, [cm["metadata"]["name"] for cm in ours]  # and each one's -evar map
    assert all(d["NVIDIA_VISIBLE_DEVICES"] == uuid and d["GPU_PORTION"] == "0.50" for d in env), env

    # S34: once both pods are gone the reservation pod is released (grace 0) by the binder's sync
    for name in ("half-a", "half-b"):
        await kube.delete(PODS, name, namespace=namespace, body={"gracePeriodSeconds": 0})

    async def released():
        left, _ = await kube.list(PODS, namespace=RESERVATION_NS, label_selector=f"runai-gpu-group={group}")
        return not left

    await eventually(released, timeout_s=60, what="the reservation pod to be released")

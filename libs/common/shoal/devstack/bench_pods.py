"""The pods of `shoal bench e2e` (pure): one mix of gangs, whole GPUs and fractions, written for each scheduler.

Every block of ten pods is a gang of four one-GPU pods (a PodGroup with minMember 4, its pods naming it by the
`pod-group-name` annotation), three one-GPU pods and three `gpu-fraction: "0.5"` pods. For Shoal the pods are
what KAI users write (the podgrouper groups the bare ones); kube-scheduler gets the equivalent plain pods: a gang
member is a one-GPU pod, a fraction a pod with no GPU request. Nodes are sized so that the whole mix fits.

    mix = pod_mix(30, "b")                      # 30 PodPlans: b-0 … b-29
    pod_manifest(mix[0], "ns", "pool", SHOAL)   # the manifest Shoal's phase creates
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from shoal.core.kai_labels import FRACTION, NODE_POOL_LABEL, POD_GROUP_ANNOTATION, QUEUE_LABEL

GPU = "nvidia.com/gpu"
BENCH_LABEL = "shoal.io/bench"  # on every namespace and node a run makes: its run tag
GANG_SIZE = 4
BLOCK = (("gang", GANG_SIZE), ("whole", 3), ("fraction", 3))  # ten pods
GPUS_PER_NODE = 8
HEADROOM = 1.25  # nodes hold a quarter more GPUs than the mix asks for

Kind = Literal["gang", "whole", "fraction"]
Flavour = Literal["shoal", "plain", "unscheduled"]  # Shoal's pods; kube-scheduler's; bound by the benchmark
SCHEDULER_NAMES: dict[Flavour, str] = {"shoal": "shoal-scheduler", "plain": "default-scheduler",
                                       "unscheduled": "no-scheduler"}


@dataclass(frozen=True)
class PodPlan:
    name: str
    kind: Kind
    group: str | None = None  # gang pods: their PodGroup
    group_size: int = 0  # gang pods: the PodGroup's minMember (the first member creates it)
    first_of_group: bool = False


def pod_mix(count: int, prefix: str) -> list[PodPlan]:
    """`count` pods named `<prefix>-<i>` in blocks of BLOCK; a gang cut short by `count` has fewer members."""
    plans: list[PodPlan] = []
    block = 0
    while len(plans) < count:
        for kind, size in BLOCK:
            take = min(size, count - len(plans))
            if take <= 0:
                break
            group = f"{prefix}-g{block}" if kind == "gang" else None
            for j in range(take):
                name = f"{prefix}-{len(plans)}"
                if group:
                    plans.append(PodPlan(name, "gang", group, take, first_of_group=j == 0))
                else:
                    plans.append(PodPlan(name, kind))  # type: ignore[arg-type]
        block += 1
    return plans


def gpus_needed(plans: list[PodPlan]) -> int:
    """Whole GPUs the mix takes on Shoal: one per gang or whole pod, one per two halves."""
    whole = sum(1 for p in plans if p.kind != "fraction")
    return whole + math.ceil(sum(1 for p in plans if p.kind == "fraction") / 2)


def nodes_needed(plans: list[PodPlan], gpus_per_node: int = GPUS_PER_NODE) -> int:
    return max(1, math.ceil(gpus_needed(plans) * HEADROOM / gpus_per_node))


def pod_manifest(plan: PodPlan, namespace: str, pool: str, flavour: Flavour) -> dict:
    annotations: dict[str, str] = {}
    limits: dict[str, str] = {}
    if plan.kind != "fraction":
        limits[GPU] = "1"
    if flavour == "shoal":
        if plan.group:
            annotations[POD_GROUP_ANNOTATION] = plan.group
        if plan.kind == "fraction":
            annotations[FRACTION] = "0.5"
    container = {"name": "c", "image": "busybox", "resources": {"limits": limits} if limits else {}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": plan.name, "namespace": namespace, "annotations": annotations,
                         "labels": {NODE_POOL_LABEL: pool, QUEUE_LABEL: namespace, "shoal.io/bench-kind": plan.kind}},
            "spec": {"schedulerName": SCHEDULER_NAMES[flavour], "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {NODE_POOL_LABEL: pool}, "containers": [container]}}


def podgroup_manifest(namespace: str, name: str, min_member: int, queue: str, pool: str = "") -> dict:
    """A gang's PodGroup; `pool`: its node pool (a PodGroup's own label decides its pool, as in KAI)."""
    labels = {NODE_POOL_LABEL: pool} if pool else {}
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"minMember": min_member, "queue": queue, "priorityClassName": "train"}}


def queue_manifest(name: str) -> dict:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}}


def binding(namespace: str, pod: str, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}

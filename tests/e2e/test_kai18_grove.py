"""A disaggregated prefill/decode system built the way Grove's KAI backend builds it (no Grove install: the test
creates what Grove's operator would create), scheduled by the podgrouper and the scheduling services.

Grove creates the pods first, each owned by its PodClique, with `kai.scheduler/skip-podgrouper`, `pod-group-name`
(the PodGang's name), the subgroup label (the PodClique's name) and the scheduling gate
`grove.io/podgang-pending-creation`; then the PodGang and, from it, the PodGroup (scheduling.run.ai/v2alpha2,
owned by the PodGang): a leaf per PodClique (minMember), a branch per PodCliqueScalingGroup (minSubGroup over its
cliques) with its own topology constraint, the PodGang's constraint on the PodGroup; then it lifts the gates.
"""

from __future__ import annotations

import contextlib

from e2e_helpers import eventually
from scenario_helpers import (
    POOL_LABEL,
    QUEUE_LABEL,
    SCHEDULER,
    conditions_now,
    create,
    node_of,
    pods,
    scheduling_condition,
    stays,
    wait_events,
    wait_running,
)
from test_explain_e2e import cli_env, shoal_cli  # noqa: F401  (cli_env is a fixture)
from test_podgrouper import podgrouper  # noqa: F401  (a fixture: the podgrouper service, test CRDs installed)

from shoal.adapters.kube import PODGROUPS, PODS, TOPOLOGIES, Resource
from shoal.errors import ShoalError

PODCLIQUES = Resource("grove.io", "v1alpha1", "podcliques", "PodClique")
PODGANGS = Resource("scheduler.grove.io", "v1alpha1", "podgangs", "PodGang")
ZONE, RACK, HOST = "topology.kubernetes.io/zone", "topology.kubernetes.io/rack", "kubernetes.io/hostname"
GATE = "grove.io/podgang-pending-creation"
ROLES = ("decode", "prefill")  # PodCliqueScalingGroups of leader + worker cliques (1 GPU pods)


def cliques(gang: str) -> list[tuple[str, int]]:
    """(PodClique name, GPUs per pod): a CPU frontend and a leader and a worker per role."""
    return [(f"{gang}-frontend", 0)] + [(f"{gang}-{role}-0-{part}", 1) for role in ROLES
                                         for part in ("leader", "worker")]


def grove_pod(namespace: str, clique: dict, gpus: int, queue: str, pool: str, gang: str) -> dict:
    name = clique["metadata"]["name"]
    container: dict = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
    if gpus:
        container["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-0", "namespace": namespace,
                         "labels": {QUEUE_LABEL: queue, POOL_LABEL: pool, "kai.scheduler/subgroup-name": name,
                                    "grove.io/podgang": gang, "grove.io/podclique": name},
                         "annotations": {"kai.scheduler/skip-podgrouper": "true", "pod-group-name": gang},
                         "ownerReferences": [{"apiVersion": "grove.io/v1alpha1", "kind": "PodClique", "name": name,
                                              "uid": clique["metadata"]["uid"], "controller": True}]},
            "spec": {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 0,
                     "priorityClassName": "inference", "schedulingGates": [{"name": GATE}],
                     "containers": [container]}}


def grove_podgroup(namespace: str, podgang: dict, queue: str, pool: str, topology: str, *,
                   gang_constraint: bool) -> dict:
    """The PodGroup Grove's KAI backend writes for the PodGang."""
    gang = podgang["metadata"]["name"]
    rack = {"topology": topology, "requiredTopologyLevel": RACK}
    subs: list[dict] = [{"name": f"{gang}-{role}-0", "minSubGroup": 2, "topologyConstraint": rack} for role in ROLES]
    subs.append({"name": f"{gang}-frontend", "minMember": 1})
    subs += [{"name": f"{gang}-{role}-0-{part}", "minMember": 1, "parent": f"{gang}-{role}-0"}
             for role in ROLES for part in ("leader", "worker")]
    spec: dict = {"minMember": 5, "queue": queue, "priorityClassName": "inference", "subGroups": subs}
    if gang_constraint:
        spec["topologyConstraint"] = {"topology": topology, "requiredTopologyLevel": ZONE}
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": gang, "namespace": namespace, "labels": {POOL_LABEL: pool},
                         "annotations": {"kai.scheduler/skip-podgrouper": "true", "grove.io/topology-name": topology},
                         "ownerReferences": [{"apiVersion": "scheduler.grove.io/v1alpha1", "kind": "PodGang",
                                              "name": gang, "uid": podgang["metadata"]["uid"],
                                              "controller": True}]},
            "spec": spec}


async def grove_system(kube, namespace: str, queue: str, pool: str, gang: str, *, gated: bool) -> dict[str, dict]:
    """The PodCliques and their pods (gated or not), as Grove creates them before the PodGang; the pods by name."""
    made = {}
    for name, gpus in cliques(gang):
        clique = await kube.create(PODCLIQUES, {"apiVersion": "grove.io/v1alpha1", "kind": "PodClique",
                                                "metadata": {"name": name, "namespace": namespace},
                                                "spec": {"replicas": 1}}, namespace=namespace)
        body = grove_pod(namespace, clique, gpus, queue, pool, gang)
        if not gated:
            del body["spec"]["schedulingGates"]
        made[body["metadata"]["name"]] = body
        await create(kube, body)
    return made


async def podgang(kube, namespace: str, gang: str, names: list[str]) -> dict:
    groups = [{"name": n.removesuffix("-0"), "minReplicas": 1,
               "podReferences": [{"namespace": namespace, "name": n}]} for n in names]
    return await kube.create(PODGANGS, {"apiVersion": "scheduler.grove.io/v1alpha1", "kind": "PodGang",
                                        "metadata": {"name": gang, "namespace": namespace},
                                        "spec": {"podgroups": groups}}, namespace=namespace)


async def test_a_grove_disaggregated_system_waits_for_its_gates_and_runs_as_a_multi_level_gang(
        podgrouper, shoal, stack, kube, namespace, node_pool, gpu_nodes, queue, cli_env):  # noqa: F811
    # zone A: racks A1 and A2 of 3 GPUs each; zone B: rack B1 of 2 GPUs
    for name, zone, rack, gpus in (("a1", "A", "A1", 3), ("a2", "A", "A2", 3), ("b1", "B", "B1", 2)):
        node = f"{node_pool}-{name}"
        await gpu_nodes(names=[node], gpus=gpus, labels={ZONE: zone, RACK: rack, HOST: node})
    topology = f"grove-{node_pool}"
    await kube.create(TOPOLOGIES, {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
                                   "metadata": {"name": topology},
                                   "spec": {"levels": [{"nodeLabel": ZONE}, {"nodeLabel": RACK},
                                                       {"nodeLabel": HOST}]}})
    try:
        await _run(kube, namespace, node_pool, queue, topology)
    finally:
        with contextlib.suppress(ShoalError):
            await kube.delete(TOPOLOGIES, topology)


async def _run(kube, namespace: str, pool: str, queue: str, topology: str) -> None:
    made = await grove_system(kube, namespace, queue, pool, "dis-0", gated=True)
    names = sorted(made)

    # the podgrouper leaves skip-podgrouper pods alone: no PodGroup, no annotation added, nothing bound
    async def untouched() -> bool:
        groups, _ = await kube.list(PODGROUPS, namespace=namespace)
        now = await pods(kube, namespace, "dis-0-")
        return not groups and all(not node_of(p) and p["metadata"]["annotations"] == made[n]["metadata"]["annotations"]
                                  for n, p in now.items()) and len(now) == 5

    await stays(untouched, seconds=4, what="gated Grove pods without their PodGroup left alone")

    # Grove's backend: the PodGang, then its PodGroup; the pods are still gated: waiting, not broken
    gang = await podgang(kube, namespace, "dis-0", names)
    await kube.create(PODGROUPS, grove_podgroup(namespace, gang, queue, pool, topology, gang_constraint=True),
                      namespace=namespace)
    (event, *_) = await wait_events(kube, namespace, kind="PodGroup", name="dis-0", reason="NotReady", timeout_s=90)
    assert event["message"].startswith("Job is not ready for scheduling. Waiting for 5 pods, currently 5 exist, "
                                       "5 are gated"), event
    assert GATE in event["message"], event

    async def waiting() -> bool:
        now = await pods(kube, namespace, "dis-0-")
        return not any(node_of(p) for p in now.values()) and await conditions_now(kube, namespace, "dis-0") == []

    await stays(waiting, seconds=3, what="no bind and no Unschedulable condition while the pods are gated")
    code, out, err = await shoal_cli("explain", f"{namespace}/dis-0-frontend-0")
    assert code == 0, err
    assert f"waiting until its scheduling gates are removed: {GATE}" in out, out

    # Grove lifts the gates once the PodGang exists
    for name in names:
        await kube.patch(PODS, name, {"spec": {"schedulingGates": []}}, namespace=namespace)
    running = await wait_running(kube, namespace, names, timeout_s=120)
    placed = {n: node_of(p) for n, p in running.items()}
    # the job requires a zone (only A holds the 4 GPU pods), each role a rack of its own: decode (first by name)
    # fills rack A1, prefill rack A2; bin-packing alone would have split prefill across the racks
    assert {placed[f"dis-0-decode-0-{part}-0"] for part in ("leader", "worker")} == {f"{pool}-a1"}, placed
    assert {placed[f"dis-0-prefill-0-{part}-0"] for part in ("leader", "worker")} == {f"{pool}-a2"}, placed
    assert placed["dis-0-frontend-0"] in (f"{pool}-a1", f"{pool}-a2"), placed
    assert await conditions_now(kube, namespace, "dis-0") == []

    # a second system with only its roles' rack constraints: decode fits rack B1, prefill no rack (1 GPU left in
    # A1 and in A2): the multi-level gang places nothing at all and names the sub-group
    second = await grove_system(kube, namespace, queue, pool, "dis-1", gated=False)
    gang = await podgang(kube, namespace, "dis-1", sorted(second))
    await kube.create(PODGROUPS, grove_podgroup(namespace, gang, queue, pool, topology, gang_constraint=False),
                      namespace=namespace)
    cond = await scheduling_condition(kube, namespace, "dis-1", timeout_s=90)
    assert (f"topology {topology}, requirement {RACK} couldn't be satisfied for job {namespace}/dis-1, "
            "subgroup dis-1-prefill-0") in cond["message"], cond

    async def none_of_the_second_bound() -> bool:
        now = await pods(kube, namespace, "dis-1-")
        return len(now) == 5 and not any(node_of(p) for p in now.values())

    await stays(none_of_the_second_bound, seconds=4, what="no pod of the gang that cannot be placed whole is bound")
    assert all(node_of(p) for p in (await pods(kube, namespace, "dis-0-")).values())
    await eventually(lambda: _no_podgroups_made(kube, namespace), timeout_s=5, what="no PodGroup but Grove's")


async def _no_podgroups_made(kube, namespace: str) -> bool:
    groups, _ = await kube.list(PODGROUPS, namespace=namespace)
    return sorted(g["metadata"]["name"] for g in groups) == ["dis-0", "dis-1"]

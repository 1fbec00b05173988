"""The podgrouper service as its own process on the real apiserver: real Jobs, Deployments and StatefulSets
(the controller-manager creates their pods), bare pods, and third-party owners (JobSet through real Jobs,
LeaderWorkerSet, PyTorchJob, MPIJob, RayCluster) installed from minimal CRDs under fixtures/crds/; then a plain
batch/v1 Job scheduled end to end by the podgrouper and the scheduling services.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_helpers import eventually, service_process

from shoal.adapters.kube import JOBS, PODGROUPS, PODS, Kube, Resource

CRD_DIR = Path(__file__).parent / "fixtures" / "crds"
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
                namespaced=False)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
LWS = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet")
PYTORCHJOBS = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
MPIJOBS = Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")
RAYCLUSTERS = Resource("ray.io", "v1", "rayclusters", "RayCluster")
CORE_EVENTS = Resource("", "v1", "events", "Event")
BARE_ANNOTATE_DELAY_S = 10  # a pending bare pod's annotation waits this long for its bind (the module's podgrouper)


async def install_crds(kubeconfig: str) -> None:
    from shoal.adapters.kube import Kube, connect_kube
    from shoal.errors import ConflictError
    from shoal.settings import KubeSettings

    api = await connect_kube(KubeSettings(kubeconfig=kubeconfig))
    kube = Kube(api)
    try:
        names = []
        for path in sorted(CRD_DIR.glob("*.yaml")):
            doc = yaml.safe_load(path.read_text())
            names.append(doc["metadata"]["name"])
            try:
                await kube.create(CRDS, doc)
            except ConflictError:
                pass
        for name in names:
            async def established(name: str = name) -> bool:
                conds = ((await kube.get(CRDS, name)).get("status") or {}).get("conditions") or []
                return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

            await eventually(established, timeout_s=30, what=f"CRD {name}")
    finally:
        await api.close()


@pytest.fixture(scope="module")
def podgrouper(stack: Any) -> Iterator[Path]:
    """The podgrouper service (own process) with Shoal's base CRDs and the third-party test CRDs installed."""
    from shoal.devstack.scheduler import install_base, service_spec

    asyncio.run(install_base(stack.kubeconfig))
    asyncio.run(install_crds(stack.kubeconfig))
    state = Path(tempfile.mkdtemp(prefix="shoal-podgrouper-"))
    spec = service_spec("podgrouper", {**stack.env(), "SHOAL_RETRY_MAX_S": "5",
                                       "SHOAL_BARE_ANNOTATE_DELAY_S": str(BARE_ANNOTATE_DELAY_S)})
    with service_process(state, spec):
        yield state


def template(labels: dict | None = None, annotations: dict | None = None, gpus: int = 0) -> dict:
    container: dict = {"name": "main", "image": "busybox"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {"metadata": {"labels": labels or {}, "annotations": annotations or {}},
            "spec": {"schedulerName": "shoal-scheduler", "terminationGracePeriodSeconds": 0,
                     "restartPolicy": "Never", "containers": [container]}}


def job(name: str, size: int, min_member: str | None, labels: dict | None = None, gpus: int = 0) -> dict:
    tmpl = template({"app": name, **(labels or {})}, gpus=gpus)
    annotations = {"kai.scheduler/batch-min-member": min_member} if min_member is not None else {}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "annotations": annotations},
            "spec": {"parallelism": size, "completions": size, "backoffLimit": 0, "template": tmpl}}


async def pods_of(kube: Kube, namespace: str, prefix: str) -> list[dict]:
    items, _ = await kube.list(PODS, namespace=namespace)
    return [p for p in items if p["metadata"]["name"].startswith(prefix)]


async def grouped(kube: Kube, namespace: str, prefix: str, count: int) -> list[dict]:
    """Wait until `count` pods named `prefix*` exist and all carry pod-group-name."""
    async def check() -> list[dict] | None:
        pods = await pods_of(kube, namespace, prefix)
        ok = len(pods) == count and all((p["metadata"].get("annotations") or {}).get("pod-group-name") for p in pods)
        return pods if ok else None

    return await eventually(check, timeout_s=60, what=f"{count} pods {prefix}* annotated with pod-group-name")


async def podgroup(kube: Kube, namespace: str, name: str) -> dict:
    return await kube.get(PODGROUPS, name, namespace=namespace)


def annotation(pod: dict) -> str:
    return pod["metadata"]["annotations"]["pod-group-name"]


async def test_job_with_batch_min_member_gets_one_podgroup(podgrouper, kube, namespace):
    labels = {"kai.scheduler/queue": "team-a", "kai.scheduler/node-pool": "pool-x"}
    created = await kube.create(JOBS, job("train", 3, "3", labels), namespace=namespace)
    uid = created["metadata"]["uid"]
    pods = await grouped(kube, namespace, "train-", 3)
    assert {annotation(p) for p in pods} == {f"pg-train-{uid}"}
    pg = await podgroup(kube, namespace, f"pg-train-{uid}")
    assert pg["spec"]["minMember"] == 3
    assert pg["spec"]["queue"] == "team-a"
    assert pg["spec"]["priorityClassName"] == "train"
    assert pg["metadata"]["labels"]["kai.scheduler/node-pool"] == "pool-x"
    assert pg["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                                  "uid": uid}]
    top = json.loads(pg["metadata"]["annotations"]["kai.scheduler/top-owner-metadata"])
    assert top["kind"] == "Job" and top["uid"] == uid
    version = pg["metadata"]["resourceVersion"]
    await asyncio.sleep(2)
    assert (await podgroup(kube, namespace, f"pg-train-{uid}"))["metadata"]["resourceVersion"] == version, (
        "a grouped Job's PodGroup must not be rewritten")


async def test_deployment_gets_one_podgroup_per_pod_with_inference(podgrouper, kube, namespace):
    tmpl = template({"app": "serve", "kai.scheduler/preemptibility": "preemptible"})
    tmpl["spec"]["restartPolicy"] = "Always"
    await kube.create(DEPLOYMENTS, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "serve"},
                                    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "serve"}},
                                             "template": tmpl}}, namespace=namespace)
    pods = await grouped(kube, namespace, "serve-", 2)
    names = {annotation(p) for p in pods}
    assert names == {f"pg-{p['metadata']['name']}-{p['metadata']['uid']}" for p in pods}
    for pod in pods:
        pg = await podgroup(kube, namespace, annotation(pod))
        assert pg["spec"]["priorityClassName"] == "inference"
        assert pg["spec"]["minMember"] == 1
        assert pg["spec"]["preemptibility"] == "preemptible"
        assert pg["metadata"]["ownerReferences"][0]["kind"] == "Pod"
        assert pg["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]


async def test_bare_pod_and_statefulset(podgrouper, kube, namespace):
    bare = {"apiVersion": "v1", "kind": "Pod", **template({"kai.scheduler/queue": "solo"}), }
    bare["metadata"]["name"] = "lonely"
    created = await kube.create(PODS, bare, namespace=namespace)
    [pod] = await grouped(kube, namespace, "lonely", 1)
    assert annotation(pod) == f"pg-lonely-{created['metadata']['uid']}"
    pg = await podgroup(kube, namespace, annotation(pod))
    assert pg["spec"]["queue"] == "solo" and pg["spec"]["minMember"] == 1

    tmpl = template({"app": "db"})
    tmpl["spec"]["restartPolicy"] = "Always"
    sts = await kube.create(STATEFULSETS, {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db", "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": "db"}}, "template": tmpl}}, namespace=namespace)
    pods = await grouped(kube, namespace, "db-", 2)
    assert {annotation(p) for p in pods} == {f"pg-db-{sts['metadata']['uid']}"}
    pg = await podgroup(kube, namespace, f"pg-db-{sts['metadata']['uid']}")
    assert pg["spec"]["minMember"] == 1 and pg["spec"]["priorityClassName"] == "train"


def owned_pod(name: str, owner: dict, labels: dict | None = None) -> dict:
    pod = {"apiVersion": "v1", "kind": "Pod", **template(labels)}
    pod["metadata"]["name"] = name
    pod["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                           "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                           "controller": True}]
    return pod


async def test_jobset_through_real_jobs_gets_subgroups(podgrouper, kube, namespace):
    def rjob(name: str, replicas: int, parallelism: int) -> dict:
        return {"name": name, "replicas": replicas,
                "template": {"spec": {"parallelism": parallelism, "completions": parallelism,
                                      "template": template()}}}

    js = await kube.create(JOBSETS, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                     "metadata": {"name": "js", "labels": {"kai.scheduler/queue": "research"}},
                                     "spec": {"replicatedJobs": [rjob("leader", 1, 1), rjob("workers", 2, 2)]}},
                           namespace=namespace)
    for rname, index, parallelism in (("leader", 0, 1), ("workers", 0, 2), ("workers", 1, 2)):
        body = job(f"js-{rname}-{index}", parallelism, None, {"jobset.sigs.k8s.io/replicatedjob-name": rname,
                                                              "jobset.sigs.k8s.io/job-index": str(index)})
        body["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                                "name": "js", "uid": js["metadata"]["uid"], "controller": True}]
        await kube.create(JOBS, body, namespace=namespace)
    pods = await grouped(kube, namespace, "js-", 5)
    name = f"pg-js-{js['metadata']['uid']}"
    assert {annotation(p) for p in pods} == {name}
    assert sorted(p["metadata"]["labels"]["kai.scheduler/subgroup-name"] for p in pods) == [
        "leader-0", "workers-0", "workers-0", "workers-1", "workers-1"]
    pg = await podgroup(kube, namespace, name)
    assert pg["spec"]["minSubGroup"] == 2 and "minMember" not in pg["spec"]
    assert pg["spec"]["queue"] == "research"
    leaves = {s["name"]: s for s in pg["spec"]["subGroups"]}
    assert leaves["workers-1"] == {"name": "workers-1", "parent": "workers", "minMember": 2}
    assert leaves["leader"]["minSubGroup"] == 1


async def test_lws_pytorch_mpi_ray_owners(podgrouper, kube, namespace):
    lws = await kube.create(LWS, {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                  "metadata": {"name": "lws"},
                                  "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2}}}, namespace=namespace)
    for group in (0, 1):
        for member in (0, 1):
            await kube.create(PODS, owned_pod(f"lws-{group}-{member}", lws,
                                              {"leaderworkerset.sigs.k8s.io/group-index": str(group)}),
                              namespace=namespace)
    pytorch = await kube.create(PYTORCHJOBS, {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "pt", "annotations": {"kai.scheduler/topology": "dc",
                                                    "kai.scheduler/topology-required-placement": "rack"}},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}}},
        namespace=namespace)
    mpi = await kube.create(MPIJOBS, {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "mpi"},
        "spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 2}},
                 "mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 4}}}}, namespace=namespace)
    ray = await kube.create(RAYCLUSTERS, {
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "ray"},
        "spec": {"headGroupSpec": {}, "workerGroupSpecs": [{"groupName": "w", "minReplicas": 2, "replicas": 3}]}},
        namespace=namespace)
    for owner, prefix in ((pytorch, "pt"), (mpi, "mpi"), (ray, "ray")):
        for i in range(2):
            await kube.create(PODS, owned_pod(f"{prefix}-{i}", owner), namespace=namespace)

    lws_pods = await grouped(kube, namespace, "lws-", 4)
    uid = lws["metadata"]["uid"]
    assert {p["metadata"]["name"]: annotation(p) for p in lws_pods} == {
        "lws-0-0": f"pg-lws-{uid}-0", "lws-0-1": f"pg-lws-{uid}-0",
        "lws-1-0": f"pg-lws-{uid}-1", "lws-1-1": f"pg-lws-{uid}-1"}
    assert (await podgroup(kube, namespace, f"pg-lws-{uid}-1"))["spec"]["minMember"] == 2
    for owner, prefix, min_member in ((pytorch, "pt", 4), (mpi, "mpi", 2), (ray, "ray", 3)):
        pods = await grouped(kube, namespace, f"{prefix}-", 2)
        name = f"pg-{prefix}-{owner['metadata']['uid']}"
        assert {annotation(p) for p in pods} == {name}
        pg = await podgroup(kube, namespace, name)
        assert pg["spec"]["minMember"] == min_member, (prefix, pg["spec"])
        assert pg["metadata"]["ownerReferences"][0]["kind"] == owner["kind"]
    pt = await podgroup(kube, namespace, f"pg-pt-{pytorch['metadata']['uid']}")
    assert pt["spec"]["topologyConstraint"] == {"topology": "dc", "requiredTopologyLevel": "rack"}


async def test_skip_podgrouper_and_unreadable_owner(podgrouper, kube, namespace):
    skipped = job("external", 1, None)
    skipped["spec"]["template"]["metadata"]["labels"]["kai.scheduler/skip-podgrouper"] = "true"
    skipped["spec"]["template"]["metadata"]["annotations"]["pod-group-name"] = "my-own-group"
    await kube.create(JOBS, skipped, namespace=namespace)
    widget_owner = {"apiVersion": "example.com/v1", "kind": "Widget",
                    "metadata": {"name": "w1", "uid": str(uuid.uuid4())}}
    await kube.create(PODS, owned_pod("widget-0", widget_owner), namespace=namespace)

    async def warned() -> list[dict]:
        items, _ = await kube.list(CORE_EVENTS, namespace=namespace)
        return [e for e in items if e.get("reason") == "PodGrouperWarning"
                and e["involvedObject"]["name"] == "widget-0"]

    [event] = await eventually(warned, timeout_s=60, what="a PodGrouperWarning event on widget-0")
    assert event["type"] == "Warning" and "Widget" in event["message"] and "w1" in event["message"]
    # the service keeps going: a pod created afterwards is grouped, the skipped pod keeps its own group
    bare = {"apiVersion": "v1", "kind": "Pod", **template()}
    bare["metadata"]["name"] = "after"
    await kube.create(PODS, bare, namespace=namespace)
    await grouped(kube, namespace, "after", 1)
    [external] = await pods_of(kube, namespace, "external-")
    assert annotation(external) == "my-own-group"
    items, _ = await kube.list(PODGROUPS, namespace=namespace)
    assert [pg["metadata"]["name"] for pg in items if "external" in pg["metadata"]["name"]] == []
    junk = await kube.create(JOBS, job("junk", 1, "three"), namespace=namespace)  # bad input: default + event
    [junk_pod] = await grouped(kube, namespace, "junk-", 1)
    assert (await podgroup(kube, namespace, annotation(junk_pod)))["spec"]["minMember"] == 1
    assert annotation(junk_pod) == f"pg-junk-{junk['metadata']['uid']}"

    async def junk_warned() -> list[dict]:
        items, _ = await kube.list(CORE_EVENTS, namespace=namespace)
        return [e for e in items if e.get("reason") == "PodGrouperWarning" and "'three'" in e["message"]]

    await eventually(junk_warned, timeout_s=30, what="a PodGrouperWarning about batch-min-member 'three'")
    widget = (await pods_of(kube, namespace, "widget-0"))[0]
    assert "pod-group-name" not in (widget["metadata"].get("annotations") or {})
    log = (podgrouper / "logs" / "shoal-podgrouper.log").read_text()
    assert log.count('"podgrouper_retry"') and '"pod":"' + namespace + '/widget-0"' in log


async def test_plain_job_is_scheduled_end_to_end(podgrouper, shoal, kube, namespace, queue, node_pool, gpu_nodes):
    await gpu_nodes(2, gpus=2)
    labels = {"kai.scheduler/queue": queue, "kai.scheduler/node-pool": node_pool}
    created = await kube.create(JOBS, job("duo", 2, "2", labels, gpus=1), namespace=namespace)

    async def bound() -> list[dict] | None:
        pods = await pods_of(kube, namespace, "duo-")
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = await eventually(bound, timeout_s=120, what="the Job's 2 pods to be bound")
    name = f"pg-duo-{created['metadata']['uid']}"
    assert {annotation(p) for p in pods} == {name}
    assert {p["spec"]["nodeName"] for p in pods} <= {f"{node_pool}-n1", f"{node_pool}-n2"}
    pg = await podgroup(kube, namespace, name)
    assert pg["spec"]["minMember"] == 2 and pg["spec"]["queue"] == queue


async def test_bare_pods_are_bound_and_their_podgroups_say_when_they_started(podgrouper, shoal, kube, namespace,
                                                                           queue, node_pool, gpu_nodes):
    """A bare pod is scheduled without waiting for the podgrouper's PodGroup and pod patch; whichever comes
    first, the bind or the PodGroup, each pod ends annotated with its PodGroup, which carries the start stamp
    (kai.scheduler/last-start-timestamp) that min-runtime protection reads."""
    await gpu_nodes(2, gpus=4)
    labels = {"kai.scheduler/queue": queue, "kai.scheduler/node-pool": node_pool}
    created = []
    for i in range(6):
        body = {"apiVersion": "v1", "kind": "Pod", **template(labels, gpus=1)}
        body["metadata"]["name"] = f"solo-{i}"
        created.append(await kube.create(PODS, body, namespace=namespace))

    async def bound() -> list[dict] | None:
        pods = await pods_of(kube, namespace, "solo-")
        return pods if len(pods) == 6 and all(p["spec"].get("nodeName") for p in pods) else None

    await eventually(bound, timeout_s=120, what="6 bare pods bound")
    pods = await grouped(kube, namespace, "solo-", 6)
    expected = {c["metadata"]["name"]: f"pg-{c['metadata']['name']}-{c['metadata']['uid']}" for c in created}
    assert {p["metadata"]["name"]: annotation(p) for p in pods} == expected

    async def stamped() -> list[dict] | None:
        groups = [await podgroup(kube, namespace, name) for name in expected.values()]
        ok = all((g["metadata"].get("annotations") or {}).get("kai.scheduler/last-start-timestamp") for g in groups)
        return groups if ok else None

    groups = await eventually(stamped, timeout_s=60, what="every bare pod's PodGroup with its start stamp")
    for g in groups:
        assert g["spec"]["minMember"] == 1 and g["spec"]["queue"] == queue
        stamp = g["metadata"]["annotations"]["kai.scheduler/last-start-timestamp"]
        assert stamp.endswith("Z") and "T" in stamp, stamp
    # a pod bound well within the podgrouper's wait got its pod-group-name from its Binding, in the bind's own
    # write: no patch ever owned the field (a Binding leaves no managedFields entry; a patch would)
    early = [p for p in pods if seconds_to_bind(p) < BARE_ANNOTATE_DELAY_S - 3]
    assert early, [seconds_to_bind(p) for p in pods]
    by_name = {g["metadata"]["name"]: g for g in groups}
    for p in early:
        writers = [m.get("manager") for m in p["metadata"].get("managedFields") or []
                   if "f:pod-group-name" in ((m.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:annotations", {})]
        assert writers == [], (p["metadata"]["name"], writers)
        # and its PodGroup was created after the bind (with the start stamp in the create)
        g = by_name[annotation(p)]
        created_at = datetime.fromisoformat(g["metadata"]["creationTimestamp"])
        assert created_at >= scheduled_at(p), (p["metadata"]["name"], g["metadata"]["creationTimestamp"])


def scheduled_at(pod: dict) -> datetime:
    return datetime.fromisoformat(next(c["lastTransitionTime"] for c in pod["status"]["conditions"]
                                       if c["type"] == "PodScheduled"))


def seconds_to_bind(pod: dict) -> float:
    """From the pod's creation to its PodScheduled condition (both to the second)."""
    return (scheduled_at(pod) - datetime.fromisoformat(pod["metadata"]["creationTimestamp"])).total_seconds()


async def test_killed_podgrouper_converges_after_restart(stack, kube, namespace):
    """SIGKILL mid-burst, more Jobs while it is down, restart: one PodGroup per Job, every pod annotated.
    A scheduler name of its own keeps the module's podgrouper out of this test."""
    import os
    import signal

    from shoal.devstack.procs import launch, stop_process, wait_ready
    from shoal.devstack.scheduler import service_spec

    scheduler = f"shoal-kill-{uuid.uuid4().hex[:6]}"
    state = Path(tempfile.mkdtemp(prefix="shoal-podgrouper-kill-"))
    spec = service_spec("podgrouper", {**stack.env(), "SHOAL_SCHEDULER_NAMES": scheduler})

    def jobs(first: int, count: int) -> list[dict]:
        out = []
        for i in range(first, first + count):
            body = job(f"burst-{i}", 2, "2")
            body["spec"]["template"]["spec"]["schedulerName"] = scheduler
            out.append(body)
        return out

    pid = await asyncio.to_thread(lambda: launch(state, spec, tie_to_parent=True))
    try:
        await asyncio.to_thread(wait_ready, state, spec, pid)
        created = [await kube.create(JOBS, b, namespace=namespace) for b in jobs(0, 4)]
        await asyncio.sleep(0.3)
        os.kill(pid, signal.SIGKILL)
        await asyncio.to_thread(stop_process, state, spec.name)  # reaps the killed process
        created += [await kube.create(JOBS, b, namespace=namespace) for b in jobs(4, 4)]
        await asyncio.sleep(1)
        pid = await asyncio.to_thread(lambda: launch(state, spec, tie_to_parent=True))
        await asyncio.to_thread(wait_ready, state, spec, pid)
        pods = await grouped(kube, namespace, "burst-", 16)
    finally:
        await asyncio.to_thread(stop_process, state, spec.name)
    expected = {j["metadata"]["name"]: f"pg-{j['metadata']['name']}-{j['metadata']['uid']}" for j in created}
    for p in pods:
        owner = p["metadata"]["ownerReferences"][0]["name"]
        assert annotation(p) == expected[owner]
    items, _ = await kube.list(PODGROUPS, namespace=namespace)
    assert sorted(pg["metadata"]["name"] for pg in items) == sorted(expected.values())
    assert all(pg["spec"]["minMember"] == 2 for pg in items)

from shoal.core.ingest.grouping import OwnerIndex, group_pod


def obj(kind, name, api="v1", uid=None, labels=None, annotations=None, owner=None, spec=None):
    meta = {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}", "labels": labels or {},
            "annotations": annotations or {}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner.get("apiVersion", ""), "kind": owner["kind"],
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"], "controller": True}]
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec or {}}


def group(pod, *owners, classes=("train", "build", "inference")):
    return group_pod(pod, OwnerIndex(owners), classes)


def test_bare_pod():
    g = group(obj("Pod", "p", labels={"kai.scheduler/queue": "q"}))
    assert g.podgroup["metadata"]["name"] == "pg-p-uid-p"
    assert g.podgroup["spec"] == {"minMember": 1, "queue": "q", "priorityClassName": "train"}


def test_job_min_member_and_owner_labels_win():
    job = obj("Job", "j", "batch/v1", annotations={"kai.scheduler/batch-min-member": "3"},
              labels={"kai.scheduler/queue": "owner-q", "priorityClassName": "build"})
    g = group(obj("Pod", "j-0", owner=job, labels={"kai.scheduler/queue": "pod-q"}), job)
    assert g.podgroup["metadata"]["name"] == "pg-j-uid-j"
    assert g.podgroup["spec"]["minMember"] == 3
    assert g.podgroup["spec"]["queue"] == "owner-q"
    assert g.podgroup["spec"]["priorityClassName"] == "build"


def test_deployment_groups_per_pod_as_inference():
    dep = obj("Deployment", "d", "apps/v1")
    rs = obj("ReplicaSet", "d-abc", "apps/v1", owner=dep)
    g = group(obj("Pod", "d-abc-1", owner=rs, labels={"kai.scheduler/preemptibility": "preemptible"}), dep, rs)
    assert g.podgroup["metadata"]["name"] == "pg-d-abc-1-uid-d-abc-1"
    assert g.podgroup["spec"]["priorityClassName"] == "inference"
    assert g.podgroup["spec"]["preemptibility"] == "preemptible"
    assert g.podgroup["spec"]["queue"] == "default-queue"


def test_missing_owner_still_grouped_by_reference():
    job = obj("Job", "gone", "batch/v1", uid="u-gone")
    g = group(obj("Pod", "gone-0", owner=job))  # the Job itself is not in the input
    assert g.podgroup["metadata"]["name"] == "pg-gone-u-gone"


def test_pod_priority_class_only_if_it_exists():
    p = obj("Pod", "p", spec={"priorityClassName": "nonexistent"})
    assert group(p).podgroup["spec"]["priorityClassName"] == "train"
    p = obj("Pod", "p", spec={"priorityClassName": "build"})
    assert group(p).podgroup["spec"]["priorityClassName"] == "build"


def test_pytorchjob_gang_over_replicas_or_min_available():
    spec = {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}}
    job = obj("PyTorchJob", "pt", "kubeflow.org/v1", spec=spec)
    assert group(obj("Pod", "pt-master-0", owner=job), job).podgroup["spec"]["minMember"] == 4
    job = obj("PyTorchJob", "pt", "kubeflow.org/v1", spec={**spec, "runPolicy": {"schedulingPolicy": {"minAvailable": 2}}})
    assert group(obj("Pod", "pt-master-0", owner=job), job).podgroup["spec"]["minMember"] == 2


def test_jobset_subgroups():
    js = obj("JobSet", "js", "jobset.x-k8s.io/v1alpha2", spec={"replicatedJobs": [
        {"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
        {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4}}}]})
    job = obj("Job", "js-workers-1", "batch/v1", owner=js)
    g = group(obj("Pod", "js-workers-1-0", owner=job), js, job)
    spec = g.podgroup["spec"]
    assert g.subgroup == "workers-1"
    assert spec["minSubGroup"] == 2 and "minMember" not in spec
    assert {"name": "workers-1", "parent": "workers", "minMember": 4} in spec["subGroups"]


def test_topology_annotations_from_owner():
    job = obj("Job", "j", "batch/v1", annotations={"kai.scheduler/topology": "t",
                                                   "kai.scheduler/topology-required-placement": "rack"})
    g = group(obj("Pod", "j-0", owner=job), job)
    assert g.podgroup["spec"]["topologyConstraint"] == {"topology": "t", "requiredTopologyLevel": "rack"}


def test_pod_patch_and_top_owner_metadata():
    import json

    job = obj("Job", "j", "batch/v1")
    g = group(obj("Pod", "j-0", owner=job), job)
    assert g.pod_patch() == {"metadata": {"annotations": {"pod-group-name": "pg-j-uid-j"}}}
    meta = json.loads(g.podgroup["metadata"]["annotations"]["kai.scheduler/top-owner-metadata"])
    assert meta == {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "uid-j"}

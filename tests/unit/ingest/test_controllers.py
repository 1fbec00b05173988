from shoal.core.ingest import expand_workloads, snapshot_from_objects

NOW = "2026-01-01T00:00:00Z"
POD_SPEC = {"schedulerName": "kai-scheduler", "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}
TEMPLATE = {"metadata": {"labels": {"kai.scheduler/queue": "q"}}, "spec": POD_SPEC}


def owner(kind, api, name, spec, **meta):
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "ns", **meta}, "spec": spec}


def names(objs, kind="Pod"):
    return sorted(o["metadata"]["name"] for o in objs if o["kind"] == kind)


def snapshot(objs):
    everything = [*objs, *expand_workloads(objs)]
    result = snapshot_from_objects(everything, now=NOW)
    assert result.problems == ()
    return result.snapshot


def test_replica_controllers():
    objs = [owner("Deployment", "apps/v1", "web", {"replicas": 2, "template": TEMPLATE}),
            owner("StatefulSet", "apps/v1", "db", {"replicas": 3, "template": TEMPLATE}),
            owner("ReplicaSet", "apps/v1", "rs", {"template": TEMPLATE})]
    assert names(expand_workloads(objs)) == ["db-0", "db-1", "db-2", "rs-0", "web-0", "web-1"]
    snap = snapshot(objs)
    by_pod = {p.name: p.pod_group for p in snap.pods}
    assert by_pod["web-0"] != by_pod["web-1"]  # Deployment: one group per pod
    assert by_pod["db-0"] == by_pod["db-1"] == by_pod["db-2"]  # StatefulSet: one group
    classes = {g.name: g.priority_class_name for g in snap.pod_groups}
    assert classes[by_pod["web-0"]] == "inference" and classes[by_pod["db-0"]] == "train"


def test_job_parallelism_capped_by_completions_and_existing_pods_respected():
    job = owner("Job", "batch/v1", "j", {"parallelism": 4, "completions": 2, "template": TEMPLATE}, uid="ju")
    assert names(expand_workloads([job])) == ["j-0", "j-1"]
    existing = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j-x", "namespace": "ns", "ownerReferences": [
        {"kind": "Job", "name": "j", "uid": "ju", "controller": True}]}, "spec": POD_SPEC}
    assert expand_workloads([job, existing]) == []


def test_pytorchjob_pods_and_gang():
    spec = {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": TEMPLATE},
                                    "Worker": {"replicas": 2, "template": TEMPLATE}}}
    objs = [owner("PyTorchJob", "kubeflow.org/v1", "pt", spec, uid="ptu")]
    assert names(expand_workloads(objs)) == ["pt-master-0", "pt-worker-0", "pt-worker-1"]
    snap = snapshot(objs)
    (group,) = snap.pod_groups
    assert (group.name, group.min_member) == ("pg-pt-ptu", 3)
    assert {p.labels["training.kubeflow.org/job-role"] for p in snap.pods} == {"master", "worker"}


def test_jobset_jobs_pods_and_subgroups():
    spec = {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 2, "template": TEMPLATE}}}]}
    objs = [owner("JobSet", "jobset.x-k8s.io/v1alpha2", "js", spec, uid="jsu")]
    created = expand_workloads(objs)
    assert names(created, "Job") == ["js-w-0", "js-w-1"]
    assert names(created) == ["js-w-0-0", "js-w-0-1", "js-w-1-0", "js-w-1-1"]
    snap = snapshot(objs)
    (group,) = snap.pod_groups
    assert group.name == "pg-js-jsu" and group.min_subgroup == 1
    assert {s.name for s in group.subgroups} == {"w", "w-0", "w-1"}
    assert {p.name: p.subgroup for p in snap.pods}["js-w-1-0"] == "w-1"


def test_leaderworkerset_and_raycluster():
    lws = owner("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "lws",
                {"replicas": 2, "leaderWorkerTemplate": {"size": 3, "workerTemplate": TEMPLATE}}, uid="lu")
    ray = owner("RayCluster", "ray.io/v1", "rc", {"headGroupSpec": {"template": TEMPLATE},
                                                  "workerGroupSpecs": [{"groupName": "gpu", "minReplicas": 2, "template": TEMPLATE}]},
                uid="ru")
    created = expand_workloads([lws, ray])
    assert names(created) == ["lws-0", "lws-0-1", "lws-0-2", "lws-1", "lws-1-1", "lws-1-2",
                              "rc-gpu-worker-0", "rc-gpu-worker-1", "rc-head"]
    snap = snapshot([lws, ray])
    sizes = {g.name: g.min_member for g in snap.pod_groups}
    assert sizes == {"pg-lws-lu-0": 3, "pg-lws-lu-1": 3, "pg-rc-ru": 3}


def test_cronjob_job_is_grouped_per_job():
    cron = owner("CronJob", "batch/v1", "nightly", {}, uid="cu")
    job = owner("Job", "batch/v1", "nightly-123", {"parallelism": 1, "template": TEMPLATE}, uid="jobu",
                ownerReferences=[{"kind": "CronJob", "name": "nightly", "uid": "cu", "controller": True}])
    snap = snapshot([cron, job])
    assert [g.name for g in snap.pod_groups] == ["pg-nightly-123-jobu"]

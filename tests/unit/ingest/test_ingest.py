from shoal.core.ingest import expand_workloads, snapshot_from_objects
from shoal.core.ingest.pods import MSG_FRACTION_AND_WHOLE, MSG_FRACTION_RANGE, MSG_MEMORY_POSITIVE
from shoal.core.model import UNLIMITED

NOW = "2026-01-01T00:00:00Z"


def node(name="n1", gpus=4, **labels):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}}}


def pod(name, gpus=0, annotations=None, labels=None, **spec):
    container = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "labels": {"kai.scheduler/queue": "q", **(labels or {})},
                         "annotations": annotations or {}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [container], **spec}}


def test_queue_units_and_limits():
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
             "spec": {"resources": {"gpu": {"quota": 1.5, "overQuotaWeight": 2}, "cpu": {"quota": 500, "limit": -1},
                                    "memory": {"quota": 1000, "limit": 0}}}}
    only_gpu = {"kind": "Queue", "metadata": {"name": "g"}, "spec": {"resources": {"gpu": {"quota": 2, "limit": -1}}}}
    snap = snapshot_from_objects([queue, only_gpu], now=NOW).snapshot
    g, q = snap.queues
    assert (q.gpu.quota, q.gpu.limit, q.gpu.effective_limit, q.gpu.weight) == (1500, None, 1500, 2.0)
    assert (q.cpu.quota, q.cpu.effective_limit) == (500, UNLIMITED)
    assert (q.memory.quota, q.memory.effective_limit) == (10**9, 0)
    assert (g.cpu.quota, g.cpu.effective_limit, g.cpu.weight) == (0, 0, 0.0)
    assert g.gpu.effective_limit == UNLIMITED


def test_pod_requests_take_max_of_init_containers():
    p = pod("p")
    p["spec"]["containers"] = [{"resources": {"requests": {"cpu": "100m", "memory": "1Gi"}}},
                               {"resources": {"requests": {"cpu": "200m"}}}]
    p["spec"]["initContainers"] = [{"resources": {"requests": {"cpu": "1", "memory": "10Mi"}}}]
    (parsed,) = snapshot_from_objects([p], now=NOW).snapshot.pods
    assert (parsed.cpu_milli, parsed.memory_bytes) == (1000, 2**30)


def test_invalid_fraction_only_marks_that_pod():
    pods = [pod("a", annotations={"gpu-fraction": "1"}), pod("b", annotations={"gpu-fraction": "abc"}),
            pod("c", gpus=1, annotations={"gpu-fraction": "0.5"}), pod("d", annotations={"gpu-memory": "0"}),
            pod("e", annotations={"gpu-fraction": "0.5"})]
    result = snapshot_from_objects(pods, now=NOW)
    assert result.problems == ()
    errors = {p.name: p.fraction_error for p in result.snapshot.pods}
    assert errors == {"a": MSG_FRACTION_RANGE, "b": MSG_FRACTION_RANGE, "c": MSG_FRACTION_AND_WHOLE,
                      "d": MSG_MEMORY_POSITIVE, "e": None}
    assert result.snapshot.pods[-1].fraction.portion_milli == 500


def test_bad_documents_are_problems_with_fields():
    bad_node = node()
    bad_node["status"]["allocatable"]["cpu"] = "lots"
    result = snapshot_from_objects([{"kind": "Queue"}, bad_node, "text", {"metadata": {"name": "x"}}], now=NOW)
    assert [(p.index, p.field) for p in result.problems] == [
        (0, "metadata"), (1, "status.allocatable.cpu"), (2, ""), (3, "kind")]


def test_node_parsing():
    n = node(**{"nvidia.com/gpu.memory": "40960", "kai.scheduler/node-pool": "a"})
    n["spec"] = {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}
    n["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    (parsed,) = snapshot_from_objects([n], now=NOW).snapshot.nodes
    assert (parsed.gpus, parsed.cpu_milli, parsed.gpu_memory_mib, parsed.pool, parsed.ready) == (4, 8000, 40960, "a", False)
    assert parsed.taints[0].key == "k"


def test_running_pod_and_gpu_group():
    p = pod("r", annotations={"gpu-fraction": "0.5"}, labels={"runai-gpu-group": "g1"}, nodeName="n1")
    (parsed,) = snapshot_from_objects([p], now=NOW).snapshot.pods
    assert (parsed.phase, parsed.node_name, parsed.gpu_groups) == ("Running", "n1", ("g1",))


def test_job_without_pods_gets_pods_and_one_gang():
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "j", "namespace": "ns", "uid": "u1", "annotations": {"kai.scheduler/batch-min-member": "3"}},
           "spec": {"parallelism": 3, "completions": 3, "template": {
               "metadata": {"labels": {"kai.scheduler/queue": "q"}},
               "spec": {"schedulerName": "kai-scheduler", "containers": [{"resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}}
    objects = [job, *expand_workloads([job])]
    snap = snapshot_from_objects(objects, now=NOW).snapshot
    assert [p.name for p in snap.pods] == ["j-0", "j-1", "j-2"]
    assert {p.pod_group for p in snap.pods} == {"pg-j-u1"}
    (group,) = snap.pod_groups
    assert (group.name, group.min_member, group.queue, group.priority_class_name) == ("pg-j-u1", 3, "q", "train")
    assert expand_workloads(objects) == []


def test_shipped_priority_classes_and_overrides():
    custom = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "train"}, "value": 10}
    snap = snapshot_from_objects([custom], now=NOW).snapshot
    assert {c.name: c.value for c in snap.priority_classes} == {"build": 100, "build-preemptible": 75,
                                                                 "inference": 125, "train": 10}


def test_unmanaged_pods_have_no_group():
    p = pod("other")
    p["spec"]["schedulerName"] = "default-scheduler"
    snap = snapshot_from_objects([p], now=NOW).snapshot
    assert snap.pods[0].managed is False and snap.pods[0].pod_group == "" and snap.pod_groups == ()


def test_config_document():
    doc = {"apiVersion": "shoal.io/v1alpha1", "kind": "SchedulerConfig",
           "spec": {"placementStrategy": {"gpu": "spread"}, "kValue": 0, "usage": {"a": {"gpu": 0.5}},
                    "minRuntime": {"preemptMinRuntime": "5m"}, "reclaimerSaturationMultiplier": 0.5}}
    result = snapshot_from_objects([doc], now=NOW)
    cfg = result.snapshot.config
    assert cfg.gpu_placement == "spread" and "consolidation" not in cfg.actions
    assert cfg.k_value == 0 and cfg.usage[0].gpu == 0.5 and cfg.preempt_min_runtime_s == 300
    assert cfg.reclaimer_saturation_multiplier == 1.0
    bad = snapshot_from_objects([{**doc, "spec": {"actions": ["allocate", "dance"]}}], now=NOW)
    assert bad.problems[0].field == "spec.actions"


def test_in_flight_bind_request_places_the_pod():
    p = pod("b", annotations={"gpu-fraction": "0.5"})
    request = {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
               "metadata": {"name": "b", "namespace": "ns"},
               "spec": {"podName": "b", "selectedNode": "n1", "selectedGPUGroups": ["g9"]}, "status": {"phase": "Pending"}}
    failed = {**request, "metadata": {"name": "c", "namespace": "ns"}, "spec": {"podName": "c", "selectedNode": "n1"},
              "status": {"phase": "Failed"}}
    snap = snapshot_from_objects([p, pod("c"), request, failed], now=NOW).snapshot
    placed = {x.name: (x.node_name, x.gpu_groups) for x in snap.pods}
    assert placed == {"b": ("n1", ("g9",)), "c": (None, ())}


def test_partition_keeps_one_node_pool():
    config = {"apiVersion": "shoal.io/v1alpha1", "kind": "SchedulerConfig", "spec": {"partitionLabelValue": "a"}}
    a_pod = pod("pa", labels={"kai.scheduler/node-pool": "a"})
    b_pod = pod("pb", labels={"kai.scheduler/node-pool": "b"})
    running_b = pod("rb", nodeName="nb")
    snap = snapshot_from_objects([config, node("na", **{"kai.scheduler/node-pool": "a"}),
                                  node("nb", **{"kai.scheduler/node-pool": "b"}), a_pod, b_pod, running_b], now=NOW).snapshot
    assert [n.name for n in snap.nodes] == ["na"]
    assert [p.name for p in snap.pods] == ["pa"]
    assert [g.node_pool for g in snap.pod_groups] == ["a"]


def test_bind_backoff_settings_and_the_binders_annotations():
    doc = {"apiVersion": "shoal.io/v1alpha1", "kind": "SchedulerConfig",
           "spec": {"bindBackoff": {"initial": "2s", "max": "1m"}}}
    cfg = snapshot_from_objects([doc], now=NOW).snapshot.config
    assert (cfg.bind_backoff_initial_s, cfg.bind_backoff_max_s) == (2, 60)
    bad = snapshot_from_objects([{**doc, "spec": {"bindBackoff": {"initial": "1m", "max": "2s"}}}], now=NOW)
    assert [(p.field, p.message) for p in bad.problems] == [
        ("spec.bindBackoff", "initial must be >= 0s and max >= initial")]

    def group(**annotations):
        return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "ns", "annotations": annotations}, "spec": {"queue": "q"}}

    (g,) = snapshot_from_objects([group(**{"shoal.io/bind-failures": "3",
                                           "shoal.io/last-bind-failure": "2026-01-01T00:00:05Z",
                                           "shoal.io/last-bind-error": "denied"})], now=NOW).snapshot.pod_groups
    assert (g.bind_failures, g.last_bind_failure, g.last_bind_error) == (3, "2026-01-01T00:00:05Z", "denied")
    (junk,) = snapshot_from_objects([group(**{"shoal.io/bind-failures": "many"})], now=NOW).snapshot.pod_groups
    assert (junk.bind_failures, junk.last_bind_failure) == (0, None), "junk in the binder's own count reads as none"


def test_a_pod_that_skips_the_podgrouper_gets_no_podgroup_and_waits_for_the_named_one():
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "ext", "namespace": "ns", "uid": "job-uid",
                        "annotations": {"kai.scheduler/skip-podgrouper": "true"}}}
    owned = pod("ext-0", annotations={"pod-group-name": "later"})
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "ext",
                                             "uid": "job-uid", "controller": True}]
    skipping = pod("grove-0", annotations={"pod-group-name": "gang", "kai.scheduler/skip-podgrouper": "true"})
    unnamed = pod("lost-0", annotations={"kai.scheduler/skip-podgrouper": "true"})
    result = snapshot_from_objects([job, owned, skipping, unnamed], now=NOW)
    assert result.generated_podgroups == {} and result.snapshot.pod_groups == ()
    assert {p.name: p.pod_group for p in result.snapshot.pods} == {"ext-0": "later", "grove-0": "gang", "lost-0": ""}

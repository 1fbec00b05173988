"""Pure parts of the podgrouper service: owner resources, skip rules, PodGroup/pod patches, events."""

from __future__ import annotations

from services.podgrouper import translate as t
from shoal.core.ingest import grouping as rules


def pod(name="p-0", uid="pod-uid", annotations=None, labels=None, owner=None, **extra):
    meta = {"name": name, "namespace": "ns", "uid": uid, "annotations": annotations or {}, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{**owner, "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "shoal-scheduler", "containers": [{"name": "c"}]}, **extra}


JOB = {"apiVersion": "batch/v1", "kind": "Job",
       "metadata": {"name": "train", "namespace": "ns", "uid": "job-uid",
                    "annotations": {"kai.scheduler/batch-min-member": "3"}}, "spec": {}}
JOB_REF = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid"}


def test_owner_resource_from_reference():
    r = t.owner_resource({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "m"})
    assert (r.group, r.version, r.plural, r.path("ns", "m")) == (
        "kubeflow.org", "v2beta1", "mpijobs", "/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs/m")
    assert t.owner_resource({"apiVersion": "v1", "kind": "ReplicationController", "name": "x"}).path("ns", "x") == (
        "/api/v1/namespaces/ns/replicationcontrollers/x")
    assert t.owner_resource({"kind": "Job", "name": "x"}) is None
    assert t.owner_resource({"apiVersion": "batch/v1", "kind": "Job"}) is None


def test_skip_rules():
    named = {"pod-group-name": "mine"}
    assert t.skip_reason(pod()) is None
    assert t.skip_reason(pod(annotations=named)) == "bare pod with pod-group-name"
    assert t.skip_reason(pod(annotations=named, labels={t.SKIP_PODGROUPER: "true"}, owner=JOB_REF)) == (
        "skip-podgrouper")
    skipping_job = {**JOB, "metadata": {**JOB["metadata"], "annotations": {t.SKIP_PODGROUPER: "true"}}}
    assert t.skip_reason(pod(annotations=named, owner=JOB_REF), [skipping_job]) == "skip-podgrouper"
    assert t.skip_reason(pod(labels={t.SKIP_PODGROUPER: "true"}, owner=JOB_REF)) == t.SKIPPED_UNNAMED, (
        "as KAI: skip-podgrouper is honoured without a pod-group-name too (the handler warns)")
    assert t.skip_reason(pod(annotations={**named, t.SKIP_PODGROUPER: "true"})) == "skip-podgrouper"
    assert t.skip_reason(pod(annotations={**named, t.SKIP_PODGROUPER: "false"}, owner=JOB_REF)) is None
    assert t.skip_reason(pod(annotations=named, owner=JOB_REF)) is None
    assert t.skip_reason(pod(status={"phase": "Succeeded"})) == "finished"
    gone = pod()
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert t.skip_reason(gone) == "deleting"


def test_desired_podgroup_is_owned_by_the_top_owner_or_the_pod():
    p = pod(owner=JOB_REF)
    grouping = rules.group_pod(p, rules.OwnerIndex([JOB]), {"train"})
    desired = t.desired_podgroup(grouping, p)
    assert desired["metadata"]["name"] == "pg-train-job-uid"
    assert desired["metadata"]["ownerReferences"] == [JOB_REF]
    assert "creationTimestamp" not in desired["metadata"]
    assert desired["spec"]["minMember"] == 3
    bare = pod()
    assert t.desired_podgroup(rules.group_pod(bare, rules.OwnerIndex([]), set()), bare)["metadata"][
        "ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "p-0", "uid": "pod-uid"}]
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-1", "namespace": "ns", "uid": "rs"}}
    served = pod(owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "rs"})
    desired = t.desired_podgroup(rules.group_pod(served, rules.OwnerIndex([rs]), set()), served)
    assert desired["metadata"]["name"] == "pg-p-0-pod-uid"
    assert desired["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    assert desired["spec"]["priorityClassName"] == "inference"


def test_podgroup_patch_only_touches_what_the_podgrouper_owns():
    p = pod(owner=JOB_REF)
    desired = t.desired_podgroup(rules.group_pod(p, rules.OwnerIndex([JOB]), set()), p)
    existing = {**desired, "metadata": {**desired["metadata"], "resourceVersion": "5",
                                        "annotations": {**desired["metadata"]["annotations"],
                                                        "kai.scheduler/last-start-timestamp": "x"}},
                "status": {"schedulingConditions": []}}
    assert t.podgroup_patch(existing, desired) is None
    drifted = {**existing, "spec": {**existing["spec"], "minMember": 1, "minSubGroup": 2}}
    assert t.podgroup_patch(drifted, desired) == {"spec": {"minMember": 3, "minSubGroup": None}}
    orphaned = {**existing, "metadata": {**existing["metadata"], "ownerReferences": []}}
    assert t.podgroup_patch(orphaned, desired) == {"metadata": {"ownerReferences": [JOB_REF]}}
    # a start stamp is added to a PodGroup without one, never over the one it has
    assert t.podgroup_patch(existing, desired, started="y") is None
    unstamped = {**desired, "metadata": {**desired["metadata"], "resourceVersion": "5"}}
    assert t.podgroup_patch(unstamped, desired) is None
    assert t.podgroup_patch(unstamped, desired, started="y") == {
        "metadata": {"annotations": {"kai.scheduler/last-start-timestamp": "y"}}}


def test_pod_patch_and_subgroup_label():
    grouping = rules.Grouping(podgroup={"metadata": {"name": "pg-x"}}, subgroup="workers-1")
    assert t.pod_patch(pod(), grouping) == {"metadata": {"annotations": {"pod-group-name": "pg-x"},
                                                         "labels": {"kai.scheduler/subgroup-name": "workers-1"}}}
    done = pod(annotations={"pod-group-name": "pg-x"}, labels={"kai.scheduler/subgroup-name": "workers-1"})
    assert t.pod_patch(done, grouping) is None


def test_input_warnings_and_event():
    bad = {**JOB, "metadata": {**JOB["metadata"], "annotations": {"kai.scheduler/batch-min-member": "three"}}}
    assert t.input_warnings([bad]) == [
        "Job train: kai.scheduler/batch-min-member 'three' is not a non-negative integer; the default is used"]
    assert t.input_warnings([JOB]) == []
    event = t.warning_event(pod(), "owner Widget ns/w1 cannot be read yet", now="2026-01-01T00:00:00Z")
    assert event["reason"] == "PodGrouperWarning" and event["type"] == "Warning"
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "p-0", "namespace": "ns",
                                       "uid": "pod-uid"}


def test_settings_from_env():
    from services.podgrouper.app import PodGrouperSettings
    from shoal.settings import load_settings

    assert load_settings(PodGrouperSettings, {}).scheduler_names == ("shoal-scheduler",)
    assert load_settings(PodGrouperSettings, {"SHOAL_SCHEDULER_NAME": "kai-scheduler"}).scheduler_names == (
        "kai-scheduler",)
    assert load_settings(PodGrouperSettings, {"SHOAL_SCHEDULER_NAMES": "a, b"}).scheduler_names == ("a", "b")

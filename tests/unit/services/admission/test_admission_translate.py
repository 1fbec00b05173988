"""Admission rules: every S31 row (reference §10), runtimeClassName injection (SPEC §2.8), queue sanity (§2.1)."""

from __future__ import annotations

import pytest

from services.admission import translate as t


def pod(annotations=None, limits=None, requests=None, runtime_class=None, name="p", namespace="ns", init=False):
    container = {"name": "main", "image": "busybox", "resources": {}}
    if limits:
        container["resources"]["limits"] = limits
    if requests:
        container["resources"]["requests"] = requests
    spec = {"schedulerName": "shoal-scheduler", "containers": [container]}
    if init:
        spec = {**spec, "containers": [{"name": "main", "image": "busybox"}], "initContainers": [container]}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}}, "spec": spec}


@pytest.mark.parametrize("value", ["1", "0", "abc", "1.5", "-1", "NaN", "inf", "", "0.5.1", "2000m"])
def test_s31_fraction_out_of_range_or_not_a_number(value):
    assert t.validate_pod(pod({"gpu-fraction": value}), gpu_sharing=True) == (
        "gpu-fraction annotation value must be a positive number smaller than 1.0")


@pytest.mark.parametrize("value", ["0.5", "0.25", "500m", ".3", "0.999"])
def test_valid_fractions_pass(value):
    assert t.validate_pod(pod({"gpu-fraction": value}), gpu_sharing=True) is None


@pytest.mark.parametrize("where", ["limits", "requests", "init"])
def test_s31_fraction_with_whole_gpu(where):
    kwargs = {"init": True, "limits": {"nvidia.com/gpu": "1"}} if where == "init" else {where: {"nvidia.com/gpu": "1"}}
    assert t.validate_pod(pod({"gpu-fraction": "0.5"}, **kwargs), gpu_sharing=True) == (
        "cannot have both GPU fraction request and whole GPU resource request/limit")


@pytest.mark.parametrize("value", ["0", "-5", "abc", "1.5", ""])
def test_s31_gpu_memory_must_be_positive_integer(value):
    assert t.validate_pod(pod({"gpu-memory": value}), gpu_sharing=True) == (
        "gpu-memory annotation value must be a positive integer greater than 0")


def test_gpu_memory_valid():
    assert t.validate_pod(pod({"gpu-memory": "2000"}), gpu_sharing=True) is None


def test_s31_num_devices_without_portion():
    assert t.validate_pod(pod({"gpu-fraction-num-devices": "2"}), gpu_sharing=True) == (
        "cannot request multiple fractional devices without specifying fraction portion or gpu-memory")


def test_num_devices_with_fraction_is_valid_and_must_be_positive():
    assert t.validate_pod(pod({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}), gpu_sharing=True) is None
    assert t.validate_pod(pod({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"}), gpu_sharing=True) == (
        t.DEVICES_POSITIVE)


def test_s31_memory_and_fraction_together():
    assert t.validate_pod(pod({"gpu-fraction": "0.5", "gpu-memory": "1000"}), gpu_sharing=True) == (
        "cannot request both GPU and GPU memory")


@pytest.mark.parametrize("annotations", [{"gpu-fraction": "0.5"}, {"gpu-memory": "100"},
                                         {"gpu-fraction": "abc"}])
def test_s31_sharing_disabled(annotations):
    assert t.validate_pod(pod(annotations), gpu_sharing=False) == (
        "attempting to create a pod ns/p with gpu sharing request, while GPU sharing is disabled")


def test_plain_pods_and_whole_gpu_pods_pass():
    assert t.validate_pod(pod(), gpu_sharing=False) is None
    assert t.validate_pod(pod(limits={"nvidia.com/gpu": "2"}), gpu_sharing=True) is None


def test_container_name_must_exist_and_mps_needs_fraction():
    assert "which the pod does not have" in t.validate_pod(
        pod({"gpu-fraction": "0.5", "gpu-fraction-container-name": "nope"}), gpu_sharing=True)
    assert t.validate_pod(pod({"gpu-fraction": "0.5", "gpu-fraction-container-name": "main"}), gpu_sharing=True) is None
    assert t.validate_pod(pod({"mps": "true"}), gpu_sharing=True) == t.MPS_WITHOUT_FRACTION


def test_junk_pod_never_raises():
    for junk in [{}, {"metadata": None}, {"metadata": {"annotations": "x"}}, {"spec": {"containers": "x"}},
                 {"metadata": {"annotations": {"gpu-fraction": None}}, "spec": {"containers": [None, 3]}}]:
        t.validate_pod(junk, gpu_sharing=True)
        t.mutate_pod(junk, runtime_class="nvidia", runtime_class_exists=True)


# ---- mutation ----------------------------------------------------------------------------------------------

RUNTIME_CLASS_OP = {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"}


def test_runtime_class_injected_into_fraction_pod_when_it_exists():
    m = t.mutate_pod(pod({"gpu-fraction": "0.5"}), runtime_class="nvidia", runtime_class_exists=True)
    assert m.patch[-1] == RUNTIME_CLASS_OP
    assert m.warnings == []


def test_runtime_class_missing_is_skipped_with_a_warning():
    m = t.mutate_pod(pod({"gpu-memory": "1000"}), runtime_class="nvidia", runtime_class_exists=False)
    assert RUNTIME_CLASS_OP not in m.patch and m.patch  # the GPU env is still pointed at its ConfigMaps
    assert m.warnings and "RuntimeClass 'nvidia' does not exist" in m.warnings[0] and "ns/p" in m.warnings[0]


@pytest.mark.parametrize("case", ["has-runtime-class", "disabled"])
def test_runtime_class_not_injected_into_a_fraction_pod(case):
    p, rc = {"has-runtime-class": (pod({"gpu-fraction": "0.5"}, runtime_class="custom"), "nvidia"),
             "disabled": (pod({"gpu-fraction": "0.5"}), "")}[case]
    m = t.mutate_pod(p, runtime_class=rc, runtime_class_exists=True)
    assert m.patch and all(op["path"] != "/spec/runtimeClassName" for op in m.patch) and m.warnings == []


@pytest.mark.parametrize("case", ["whole-gpu", "plain", "invalid"])
def test_pods_that_share_no_gpu_are_not_mutated(case):
    p = {"whole-gpu": pod(limits={"nvidia.com/gpu": "1"}), "plain": pod(),
         "invalid": pod({"gpu-fraction": "1.5"})}[case]
    m = t.mutate_pod(p, runtime_class="nvidia", runtime_class_exists=True)
    assert m.patch == [] and m.warnings == []


def test_fraction_container_env_comes_from_the_pods_configmaps_as_kai_names_them():
    import jsonpatch_apply as jp  # tests/unit/services: a JSON Patch applier (RFC 6902 add/replace)

    p = pod({"gpu-fraction": "0.5"}, name="")
    p["metadata"]["generateName"] = "job-a-"
    p["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "job-a", "uid": "u"}]
    p["spec"]["containers"][0]["env"] = [{"name": "KEEP", "value": "1"}, {"name": "GPU_PORTION", "value": "9"}]
    m = t.mutate_pod(p, runtime_class="", runtime_class_exists=False, random7="abcdefg")
    out = jp.apply(p, m.patch)
    assert out["metadata"]["annotations"]["runai/shared-gpu-configmap"] == "job-a-abcdefg-shared-gpu"
    env = out["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "KEEP", "value": "1"}
    assert {e["name"]: e["valueFrom"]["configMapKeyRef"] for e in env[1:]} == {
        key: {"name": "job-a-abcdefg-shared-gpu-0", "key": key}
        for key in ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")}
    assert out["spec"]["containers"][0]["envFrom"] == [{"configMapRef": {"name": "job-a-abcdefg-shared-gpu-0-evar"}}]


def test_named_init_container_gets_the_env_and_a_stored_prefix_is_kept():
    import jsonpatch_apply as jp

    p = pod({"gpu-fraction": "0.5", "gpu-fraction-container-name": "warmup",
             "runai/shared-gpu-configmap": "mine-shared-gpu"})
    p["spec"]["initContainers"] = [{"name": "warmup", "image": "busybox"}]
    out = jp.apply(p, t.mutate_pod(p, runtime_class="", runtime_class_exists=False, random7="zzzzzzz").patch)
    assert out["metadata"]["annotations"]["runai/shared-gpu-configmap"] == "mine-shared-gpu"
    refs = {e["valueFrom"]["configMapKeyRef"]["name"] for e in out["spec"]["initContainers"][0]["env"]}
    assert refs == {"mine-shared-gpu-i0"}
    assert "env" not in out["spec"]["containers"][0]


# ---- queues ------------------------------------------------------------------------------------------------

def queue(name, parent=None, **resources):
    spec = {"resources": resources}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


FULL = {"quota": -1, "limit": -1, "overQuotaWeight": 1}


def test_valid_queue_has_no_warnings():
    v = t.validate_queue("CREATE", queue("q", gpu={"quota": 2, "limit": 4, "overQuotaWeight": 1}, cpu=FULL,
                                         memory=FULL), None, [])
    assert v.denial is None and v.warnings == []


@pytest.mark.parametrize("field", ["quota", "limit"])
def test_negative_other_than_minus_one_rejected(field):
    res = {"quota": 1, "limit": 2, field: -2}
    v = t.validate_queue("CREATE", queue("q", gpu=res, cpu=FULL, memory=FULL), None, [])
    assert v.denial == f"resources.gpu.{field}: must be -1 (unlimited) or >= 0, got -2"


def test_minus_one_allowed_and_negative_weight_rejected():
    assert t.validate_queue("CREATE", queue("q", gpu=FULL, cpu=FULL, memory=FULL), None, []).denial is None
    v = t.validate_queue("CREATE", queue("q", gpu={"quota": 1, "limit": 1, "overQuotaWeight": -1}, cpu=FULL,
                                         memory=FULL), None, [])
    assert v.denial == "resources.gpu.overQuotaWeight: must be >= 0, got -1"


def test_limit_below_quota_rejected():
    v = t.validate_queue("CREATE", queue("q", gpu={"quota": 4, "limit": 2}, cpu=FULL, memory=FULL), None, [])
    assert v.denial == "resources.gpu.limit (2) must not be below quota (4); use -1 for unlimited"


def test_missing_parent_rejected_on_create_only():
    q = queue("child", parent="ghost", gpu=FULL, cpu=FULL, memory=FULL)
    assert t.validate_queue("CREATE", q, None, []).denial == (
        "parentQueue: parent queue 'ghost' does not exist; create it first")
    assert t.validate_queue("UPDATE", q, q, []).denial is None


def test_omitted_limit_warns_limit_equals_quota():
    v = t.validate_queue("CREATE", queue("q", gpu={"quota": 1}, cpu=FULL, memory=FULL), None, [])
    assert v.denial is None
    assert v.warnings == ["resources.gpu: limit omitted: Shoal reads it as limit = quota (1)"]


def test_explicit_limit_zero_with_quota_warns():
    v = t.validate_queue("CREATE", queue("q", gpu={"quota": 2, "limit": 0}, cpu=FULL, memory=FULL), None, [])
    assert v.denial is None
    assert len(v.warnings) == 1 and "explicit limit 0 is a hard cap of 0 although quota is 2" in v.warnings[0]


def test_omitted_section_warns():
    v = t.validate_queue("CREATE", queue("q", gpu=FULL), None, [])
    assert [w.split(" omitted")[0] for w in v.warnings] == ["resources.cpu", "resources.memory"]


def test_children_over_parent_warns():
    parent = queue("p", gpu={"quota": 2, "limit": -1}, cpu=FULL, memory=FULL)
    a = queue("a", parent="p", gpu={"quota": 1.5, "limit": -1}, cpu=FULL, memory=FULL)
    b = queue("b", parent="p", gpu={"quota": 1, "limit": -1}, cpu=FULL, memory=FULL)
    v = t.validate_queue("CREATE", b, None, [parent, a])
    assert v.denial is None
    assert v.warnings == ["child queues of 'p' have gpu quotas summing to 2.5, more than its quota 2"]
    lowered = queue("p", gpu={"quota": 1, "limit": -1}, cpu=FULL, memory=FULL)
    assert t.validate_queue("UPDATE", lowered, parent, [parent, a]).warnings == [
        "child queues of 'p' have gpu quotas summing to 1.5, more than its quota 1"]


def test_resources_required_and_junk_never_raises():
    assert t.validate_queue("CREATE", {"metadata": {"name": "q"}, "spec": {}}, None, []).denial == (
        "resources must be specified")
    v = t.validate_queue("CREATE", queue("q", gpu={"quota": "abc", "limit": None}, cpu=[1], memory=FULL), None, [])
    assert "resources.gpu.quota: must be a number" in v.denial and "resources.cpu: must be an object" in v.denial
    t.validate_queue("CREATE", {"spec": "x"}, None, [None, 3, {"metadata": 1}])


def test_delete_with_children_rejected():
    parent = queue("p", gpu=FULL, cpu=FULL, memory=FULL)
    child = queue("c", parent="p", gpu=FULL, cpu=FULL, memory=FULL)
    assert t.validate_queue("DELETE", {}, parent, [parent, child]).denial == (
        "queue 'p' still has child queues: c; delete or move them first")
    assert t.validate_queue("DELETE", {}, child, [parent, child]).denial is None


def test_parent_cycle_rejected():
    a = queue("a", parent="b", gpu=FULL, cpu=FULL, memory=FULL)
    b = queue("b", parent="c", gpu=FULL, cpu=FULL, memory=FULL)
    c = queue("c", gpu=FULL, cpu=FULL, memory=FULL)
    moved = queue("c", parent="a", gpu=FULL, cpu=FULL, memory=FULL)
    assert t.validate_queue("UPDATE", moved, c, [a, b, c]).denial == (
        "parentQueue: 'a' would make a cycle: c -> a -> b -> c")
    assert t.validate_queue("UPDATE", queue("c", parent="x", gpu=FULL, cpu=FULL, memory=FULL), c,
                            [a, b, c]).denial is None
    looped = [queue("x", parent="y"), queue("y", parent="x")]  # already broken: still terminates
    assert t.validate_queue("CREATE", queue("z", parent="x", gpu=FULL, cpu=FULL, memory=FULL), None,
                            looped).denial is None


def _json():
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8))
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(
            ["metadata", "spec", "annotations", "containers", "resources", "limits", "gpu", "quota", "limit",
             "parentQueue", "name", "gpu-fraction", "gpu-memory", "overQuotaWeight", "cpu"]), inner, max_size=4)),
        max_leaves=12)


def test_bad_input_never_raises():
    from hypothesis import given, settings

    @settings(max_examples=300, deadline=None)
    @given(_json(), _json(), st_ops())
    def check(obj, other, operation):
        obj = obj if isinstance(obj, dict) else {"spec": obj}
        t.validate_pod(obj, gpu_sharing=True)
        t.mutate_pod(obj, runtime_class="nvidia", runtime_class_exists=True)
        t.validate_queue(operation, obj, other if isinstance(other, dict) else None,
                         other if isinstance(other, list) else [])

    check()


def st_ops():
    from hypothesis import strategies as st

    return st.sampled_from(["CREATE", "UPDATE", "DELETE"])

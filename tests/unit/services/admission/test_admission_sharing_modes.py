"""Admission under KAI v0.18's GPU sharing modes and with the per-container GPU annotations."""

from __future__ import annotations

import pytest

from services.admission import sharing
from services.admission import translate as t

REQ = "nvidia.com/container.main.gpu-memory.request"
LIM = "nvidia.com/container.main.gpu-memory.limit"
MODE = "nvidia.com/container.main.gpu-compute.mode"


def pod(annotations=None, pool=None, gpus=None):
    container = {"name": "main", "image": "busybox"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    labels = {"kai.scheduler/node-pool": pool} if pool else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": labels, "annotations": annotations or {}},
            "spec": {"schedulerName": "shoal-scheduler", "containers": [container]}}


@pytest.mark.parametrize("annotations", [{"gpu-fraction": "0.5"}, {"gpu-memory": "1024"}, {REQ: "1Gi"}, {LIM: "2Gi"}])
def test_disabled_denies_every_fraction_form(annotations):
    assert t.validate_pod(pod(annotations), mode="Disabled") == (
        "attempting to create a pod ns/p with gpu sharing request, while GPU sharing is disabled")
    assert t.validate_pod(pod(annotations), gpu_sharing=False) is not None  # legacy SHOAL_GPU_SHARING=false


def test_disabled_still_admits_whole_gpus_and_a_compute_mode_alone():
    assert t.validate_pod(pod(gpus="1"), mode="Disabled") is None
    assert t.validate_pod(pod({MODE: "sm-sharing"}), mode="Disabled") is None


@pytest.mark.parametrize("mode", ["NonMemoryEnforced", "HamiCore", "NvFractions"])
def test_per_container_annotations_are_checked_in_every_enabled_mode(mode):
    assert t.validate_pod(pod({REQ: "2Gi", LIM: "4Gi", MODE: "sm-sharing"}), mode=mode) is None
    assert t.validate_pod(pod({REQ: "4Gi", LIM: "2Gi"}), mode=mode) == (
        "invalid fraction request for container main: request is greater than limit")
    assert t.validate_pod(pod({REQ: "x"}), mode=mode) == (
        f"{REQ} annotation value must be a valid Kubernetes memory quantity greater than 0")
    assert t.validate_pod(pod({MODE: "both"}), mode=mode) == "invalid NvFractions compute mode: both"
    assert t.validate_pod(pod({REQ: "2Gi"}, gpus="1"), mode=mode) == (
        "cannot have both GPU fraction request and whole GPU resource request/limit")


def test_binder_owned_annotations_are_refused():
    denial = t.validate_pod(pod({"nvidia.com/container.main.gpus.devices": "GPU-1"}))
    assert denial and "written by Shoal's binder" in denial


def test_pool_mode_wins_over_the_default():
    assert sharing.pod_mode(pod(pool="a"), "NvFractions", {"a": "Disabled"}) == "Disabled"
    assert sharing.pod_mode(pod(pool="b"), "NvFractions", {"a": "Disabled"}) == "NvFractions"
    assert sharing.pod_mode(pod(pool="b"), "NvFractions", {}, gpu_sharing=False) == "Disabled"


def _env(patch):
    return next(op["value"] for op in patch if op["path"].endswith("/env"))


def test_non_memory_enforced_points_the_container_at_its_configmaps():
    got = t.mutate_pod(pod({REQ: "2Gi"}), runtime_class="", runtime_class_exists=False, random7="abcdefg")
    assert {e["name"] for e in _env(got.patch)} == {"NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION"}


def test_hamicore_adds_the_memory_limit_reference():
    got = t.mutate_pod(pod({"gpu-fraction": "0.5"}), runtime_class="", runtime_class_exists=False,
                       random7="abcdefg", mode="HamiCore")
    hami = [e for e in _env(got.patch) if e["name"] == "CUDA_DEVICE_MEMORY_LIMIT"]
    assert hami == [{"name": "CUDA_DEVICE_MEMORY_LIMIT", "valueFrom": {"configMapKeyRef": {
        "name": "p-abcdefg-shared-gpu-0", "key": "CUDA_DEVICE_MEMORY_LIMIT", "optional": True}}}]


def test_nvfractions_uses_annotations_not_configmaps():
    got = t.mutate_pod(pod({"gpu-memory": "2048"}), runtime_class="nvidia", runtime_class_exists=True,
                       mode="NvFractions")
    assert got.patch == [
        {"op": "add", "path": "/metadata/annotations/nvidia.com~1container.main.gpu-memory.request", "value": "2048Mi"},
        {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"}]
    plain = t.mutate_pod(pod({REQ: "2Gi"}), runtime_class="", runtime_class_exists=False, mode="NvFractions")
    assert plain.patch == []


def test_disabled_mutates_nothing():
    assert t.mutate_pod(pod({"gpu-fraction": "0.5"}), runtime_class="nvidia", runtime_class_exists=True,
                        mode="Disabled").patch == []

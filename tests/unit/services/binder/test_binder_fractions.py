"""What a shared GPU's bind writes per GPU sharing mode (services.binder.fractions, kubeobjects)."""

from __future__ import annotations

import pytest

from services.binder import fractions
from services.binder import kubeobjects as ko
from shoal.core.plan import Bind


def bind(**kw) -> Bind:
    return Bind(pod="ns/p", pod_uid="u", node="n1", gpu_groups=("g",), fraction="0.50", gpus=1,
                received_resource_type="Fraction", **kw)


def pod(annotations=None):
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "main"}]}}


def test_reservation_pod_records_the_compute_mode():
    got = ko.reservation_pod("n1", "g", "kai-resource-reservation",
                             annotations=fractions.reservation_annotations("sm-sharing"))
    assert got["metadata"]["annotations"]["nvidia.com/container.reservation.gpu-compute.mode"] == "sm-sharing"
    assert got["spec"]["containers"][0]["name"] == fractions.RESERVATION_CONTAINER
    assert fractions.reservation_annotations(None) == {
        "nvidia.com/container.reservation.gpu-compute.mode": "time-slicing"}


def test_non_memory_enforced_writes_kai_configmaps_only():
    assert fractions.uses_configmaps("NonMemoryEnforced")
    assert fractions.capabilities_extra(bind(gpu_memory_mib=20480), "NonMemoryEnforced") == {}
    assert fractions.pod_annotations(pod(), bind(), ["GPU-1"], "NonMemoryEnforced") == {}


def test_hamicore_limit_is_the_memory_or_the_dynamic_limit():
    assert fractions.capabilities_extra(bind(gpu_memory_mib=20480), "HamiCore") == {
        "CUDA_DEVICE_MEMORY_LIMIT": "20480m"}
    assert fractions.capabilities_extra(bind(gpu_memory_mib=1024, gpu_memory_limit_mib=4096), "HamiCore") == {
        "CUDA_DEVICE_MEMORY_LIMIT": "4096m"}
    capabilities, _ = ko.fraction_configmaps(pod(), ["GPU-1"], "0.50", {"CUDA_DEVICE_MEMORY_LIMIT": "20480m"})
    assert capabilities["data"]["CUDA_DEVICE_MEMORY_LIMIT"] == "20480m"


def test_hamicore_fails_closed_without_a_memory():
    with pytest.raises(fractions.FractionRefused, match="CUDA_DEVICE_MEMORY_LIMIT cannot be set"):
        fractions.capabilities_extra(bind(), "HamiCore")


def test_nvfractions_passes_the_gpu_by_annotations():
    assert not fractions.uses_configmaps("NvFractions")
    assert fractions.pod_annotations(pod(), bind(gpu_memory_mib=20480), ["GPU-1", "GPU-2"], "NvFractions") == {
        "nvidia.com/container.main.gpus.devices": "GPU-1,GPU-2",
        "nvidia.com/container.main.gpu-memory.request": "20480Mi"}
    given = pod({"nvidia.com/container.main.gpu-memory.request": "2Gi"})
    assert fractions.pod_annotations(given, bind(gpu_memory_mib=2048), ["GPU-1"], "NvFractions") == {
        "nvidia.com/container.main.gpus.devices": "GPU-1"}
    with pytest.raises(fractions.FractionRefused, match="unknown"):
        fractions.pod_annotations(pod(), bind(), ["GPU-1"], "NvFractions")


def test_disabled_refuses_the_bind():
    with pytest.raises(fractions.FractionRefused, match="while GPU sharing is disabled"):
        fractions.pod_annotations(pod(), bind(), ["GPU-1"], "Disabled")

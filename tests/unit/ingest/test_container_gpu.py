"""KAI v0.18 per-container GPU annotations → FractionRequest / compute mode, malformed values → KAI's texts."""

from __future__ import annotations

import pytest

from shoal.core.ingest.container_gpu import compute_mode_of, container_gpu_of
from shoal.core.ingest.pods import fraction_of, pod_from
from shoal.core.model import FractionRequest
from shoal.core.sharing_mode import mode_for_pool, parse_pool_modes, request_error

REQ = "nvidia.com/container.main.gpu-memory.request"
LIM = "nvidia.com/container.main.gpu-memory.limit"
MODE = "nvidia.com/container.main.gpu-compute.mode"


def test_request_and_limit_make_a_dynamic_fraction():
    got, err = fraction_of({REQ: "10Gi", LIM: "30Gi"}, 0, ("main",))
    assert err is None and got == FractionRequest(gpu_memory_mib=10240, gpu_memory_limit_mib=30720)


def test_limit_alone_is_the_request_and_quantities_round_up_to_mib():
    assert fraction_of({LIM: "20Gi"}, 0, ("main",)) == (FractionRequest(gpu_memory_mib=20480), None)
    assert fraction_of({REQ: "1000M"}, 0, ("main",))[0].gpu_memory_mib == 954  # 10^9 bytes, rounded up


def test_request_wins_over_gpu_fraction_and_must_agree_with_gpu_memory():
    assert fraction_of({REQ: "2Gi", "gpu-fraction": "0.5"}, 0, ("main",))[0] == FractionRequest(gpu_memory_mib=2048)
    assert fraction_of({REQ: "2Gi", "gpu-memory": "2048"}, 0, ("main",))[0] == FractionRequest(gpu_memory_mib=2048)


@pytest.mark.parametrize(("annotations", "message"), [
    ({REQ: "abc"}, f"{REQ} annotation value must be a valid Kubernetes memory quantity greater than 0"),
    ({REQ: "-1Gi"}, f"{REQ} annotation value must be a valid Kubernetes memory quantity greater than 0"),
    ({LIM: ""}, f"{LIM} annotation value must be a valid Kubernetes memory quantity greater than 0"),
    ({REQ: "8Gi", LIM: "4Gi"}, "invalid fraction request for container main: request is greater than limit"),
    ({MODE: "exclusive"}, "invalid NvFractions compute mode: exclusive"),
    ({"nvidia.com/container.main.gpu-memory": "4Gi"}, "invalid NvFractions annotation key: nvidia.com/container.main.gpu-memory"),
    ({"nvidia.com/container..gpu-memory.request": "4Gi"}, "invalid NvFractions annotation key: nvidia.com/container..gpu-memory.request"),
    ({"nvidia.com/container.other.gpu-memory.request": "4Gi"},
     "container other not found in pod spec, but a fractional annotation referencing it was found"),
    ({REQ: "4Gi", "nvidia.com/container.side.gpu-compute.mode": "sm-sharing"},
     "currently, kai doesn't support multiple containers with fractional GPU requests"),
])
def test_malformed_values_give_kai_texts(annotations, message):
    assert fraction_of(annotations, 0, ("main", "side")) == (None, message)


def test_cross_checks_with_the_legacy_annotations():
    assert "cannot combine nvidia.com/container. limit annotation" in fraction_of(
        {LIM: "4Gi", "gpu-memory": "4096"}, 0, ("main",))[1]
    assert fraction_of({REQ: "4Gi", "gpu-memory": "100"}, 0, ("main",))[1] == (
        "NvFractions memory request (4096Mi) does not match gpu-memory annotation value (100 MiB)")
    assert fraction_of({REQ: "4Gi"}, 1, ("main",))[1] == (
        "cannot have both GPU fraction request and whole GPU resource request/limit")
    assert fraction_of({REQ: "4Gi", "gpu-fraction-container-name": "side"}, 0, ("main", "side"))[1] == (
        "gpu-fraction-container-name annotation value side does not match container name main")


def test_binder_owned_annotations_are_no_request():
    annotations = {"nvidia.com/container.main.gpus.devices": "GPU-1", "nvidia.com/container.main.gpu-compute.portion": "50"}
    assert container_gpu_of(annotations, ("main",)) == (None, None)


def test_compute_mode_alone_is_no_request_but_is_kept_on_the_pod():
    pod = pod_from({"metadata": {"name": "p", "namespace": "n", "uid": "u", "annotations": {MODE: "sm-sharing"}},
                    "spec": {"containers": [{"name": "main"}]}}, pod_group="pg", subgroup=None, managed=True, now="0")
    assert pod.fraction is None and pod.fraction_error is None and pod.compute_mode == "sm-sharing"
    assert compute_mode_of({MODE: "bogus"}) is None


def test_pod_from_never_raises_on_malformed_annotations():
    for value in ("", "x", "1e999999", "NaN", "0", "-5"):
        pod = pod_from({"metadata": {"name": "p", "namespace": "n", "uid": "u", "annotations": {REQ: value}},
                        "spec": {"containers": [{"name": "main"}]}}, pod_group="pg", subgroup=None, managed=True, now="0")
        assert pod.fraction is None and pod.fraction_error, value


def test_disabled_mode_refuses_every_fraction():
    pod = pod_from({"metadata": {"name": "p", "namespace": "n", "uid": "u", "annotations": {REQ: "1Gi"}},
                    "spec": {"containers": [{"name": "main"}]}}, pod_group="pg", subgroup=None, managed=True, now="0")
    assert request_error(pod, "NvFractions") is None
    assert request_error(pod, "Disabled") == (
        "attempting to create a pod n/p with gpu sharing request, while GPU sharing is disabled")


def test_pool_modes():
    modes, problems = parse_pool_modes(["a=NvFractions", "b = Disabled", "c=Bogus", "nonsense"])
    assert modes == {"a": "NvFractions", "b": "Disabled"} and len(problems) == 2
    assert mode_for_pool("HamiCore", modes, "a") == "NvFractions"
    assert mode_for_pool("HamiCore", modes, "z") == "HamiCore"


def test_scheduler_config_gpu_sharing_mode():
    from shoal.core.ingest.common import IngestError
    from shoal.core.ingest.config import config_from

    assert config_from(None)[0].gpu_sharing_mode == "NonMemoryEnforced"
    assert config_from({"spec": {"gpuSharingMode": "NvFractions"}})[0].gpu_sharing_mode == "NvFractions"
    with pytest.raises(IngestError) as err:
        config_from({"spec": {"gpuSharingMode": "Fractions"}})
    assert err.value.field == "spec.gpuSharingMode" and "unknown GPU sharing mode 'Fractions'" in err.value.message


def test_service_mode_fills_the_planner_config_unless_it_sets_one():
    from shoal.core.ingest.config import Given, config_from

    assert config_from(None, Given(sharing_mode="NonMemoryEnforced"))[0].gpu_sharing_mode == "NonMemoryEnforced"
    assert config_from(None, Given(sharing_mode="Disabled"))[0].gpu_sharing_mode == "Disabled"
    doc = {"apiVersion": "shoal.io/v1alpha1", "kind": "SchedulerConfig", "spec": {"kValue": 2}}
    shard, _ = config_from(doc, Given(sharing_mode="HamiCore"))
    assert (shard.gpu_sharing_mode, shard.k_value) == ("HamiCore", 2)
    own = {"spec": {"gpuSharingMode": "NvFractions"}}
    assert config_from(own, Given(sharing_mode="Disabled"))[0].gpu_sharing_mode == "NvFractions"

"""The node agent's policing and MPS values per GPU sharing mode and per-container compute mode."""

import pytest

from services.nodeagent.fake_backend import FakeInventory
from services.nodeagent.handlers import AgentConfig, NodeAgent
from services.nodeagent.memory_policy import PolicyConfig
from services.nodeagent.shares import parse_share
from services.nodeagent.sharing_modes import mode_policy, mps_values

from .helpers import pod
from .test_handlers import LABELS, NODE, fractional, reservation

REQ = "nvidia.com/container.main.gpu-memory.request"
LIM = "nvidia.com/container.main.gpu-memory.limit"
MODE = "nvidia.com/container.main.gpu-compute.mode"
CM = {"runai/shared-gpu-configmap": "frac-abc1234-shared-gpu"}


def test_per_container_memory_is_a_share_with_its_limit():
    spec = parse_share(pod("p", {REQ: "2Gi", LIM: "4Gi", MODE: "sm-sharing"}), 10000)
    assert (spec.mem_request_mib, spec.mem_limit_mib, spec.compute_mode) == (2048, 4096, "sm-sharing")
    assert spec.dynamic and spec.compute_request > 0  # sm-sharing: its SMs are its share of the card


def test_malformed_per_container_memory_is_a_share_error():
    assert parse_share(pod("p", {REQ: "lots"}), 10000).message.endswith(
        "annotation value must be a valid Kubernetes memory quantity greater than 0")


@pytest.mark.parametrize(("mode", "policy", "reclaim"), [
    ("NonMemoryEnforced", "enforce", True), ("HamiCore", "report", True),
    ("NvFractions", "report", False), ("Disabled", "report", False)])
def test_mode_policy(mode, policy, reclaim):
    got = mode_policy(PolicyConfig(policy="enforce"), mode)
    assert (got.policy, got.dynamic_fractions) == (policy, reclaim)
    assert mode_policy(PolicyConfig(policy="off"), mode).policy == "off"


def test_stated_time_slicing_takes_the_whole_gpu_in_mps():
    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2500M"}
    assert mps_values(env, "time-slicing")["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "100"
    assert mps_values(env, "sm-sharing") == env and mps_values(env, None) == env


def _over_share(mode):
    inv = FakeInventory.for_node("n1", LABELS, {"nvidia.com/gpu": "1"})
    gpu = inv.gpus[0].uuid
    pods = [reservation("r1", "g1", "t0", gpu), fractional("frac", "g1", {REQ: "2000Mi"})]
    inv.start_process(pid=42, gpu_uuid=gpu, used_mib=4000, start_ticks=9, pod_uid="uid-frac")
    agent = NodeAgent("n1", AgentConfig(may_choose_devices=True))
    enforce = PolicyConfig(policy="enforce", grace_s=5)
    agent.tick(NODE, pods, inv.sample(), 0.0, policy=enforce, sharing_mode=mode)
    return agent.tick(NODE, pods, inv.sample(), 6.0, policy=enforce, sharing_mode=mode)


def test_only_non_memory_enforced_kills_for_over_share():
    assert [k.reason for k in _over_share("NonMemoryEnforced").kills] == ["GPUMemoryLimitExceeded"]
    for mode in ("HamiCore", "NvFractions"):
        later = _over_share(mode)
        assert later.kills == [] and later.pods[0].over_share_mib == 2000, mode


@pytest.mark.parametrize(("mode", "written"), [("NonMemoryEnforced", True), ("HamiCore", True),
                                               ("NvFractions", False), ("Disabled", False)])
def test_mps_configmaps_follow_the_mode(mode, written):
    inv = FakeInventory.for_node("n1", LABELS, {"nvidia.com/gpu": "1"})
    gpu = inv.gpus[0].uuid
    agent = NodeAgent("n1", AgentConfig(mps=True))
    pods = [reservation("r1", "g1", "t0", gpu),
            fractional("frac", "g1", {REQ: "2500Mi", MODE: "sm-sharing", **CM})]
    got = agent.tick(NODE, pods, inv.sample(), 0.0, policy=PolicyConfig(), sharing_mode=mode)
    if not written:
        assert got.configmaps == []
        return
    (cm,) = got.configmaps
    assert cm.data == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2500M"}

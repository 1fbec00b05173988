from services.nodeagent.fake_backend import gpus_for_node
from services.nodeagent.mig import capacity_mib, mig_refusal, node_is_mig, swap_refusal


def test_mig_detection_from_gpus_labels_and_allocatable():
    plain = gpus_for_node("n", {}, {"nvidia.com/gpu": "1"})
    assert not node_is_mig(plain, {}, {"nvidia.com/gpu": "1"})
    assert node_is_mig(gpus_for_node("n", {"nvidia.com/mig.strategy": "single"}, {"nvidia.com/gpu": "1"}), {}, {})
    assert node_is_mig(plain, {"node-role.kubernetes.io/mig-enabled": "true"}, {})
    assert node_is_mig(plain, {}, {"nvidia.com/mig-1g.10gb": "7"})
    r = mig_refusal("ns/p", "n")
    assert r.reason == "GPUSharingUnsupportedOnMIG" and "MIG" in r.message


def test_swap_capacity_and_refusal():
    gpu = gpus_for_node("n", {"nvidia.com/gpu.memory": "16384"}, {"nvidia.com/gpu": "1"})[0]
    assert capacity_mib(gpu, {}) == 16384
    assert capacity_mib(gpu, {"run.ai/swap-enabled": "true"}) == 14336  # a 16 GiB T4 appears as 14 GiB
    assert "not supported" in swap_refusal("ns/p").message

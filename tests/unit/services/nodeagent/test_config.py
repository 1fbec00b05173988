import subprocess
import sys

import pytest

from services.nodeagent.config import NodeAgentSettings
from shoal.errors import ConfigError
from shoal.settings import load_settings


def test_settings_from_env_and_pool_policies():
    s = load_settings(NodeAgentSettings, {
        "SHOAL_NODE_NAME": "gpu-7", "SHOAL_MEMORY_POLICY": "report",
        "SHOAL_POOL_MEMORY_POLICIES": "train=enforce, dev=off", "SHOAL_GRACE_PERIOD_S": "3",
    })
    assert s.node_name == "gpu-7" and s.backend == "nvml" and s.reservation_namespace == "kai-resource-reservation"
    assert s.policy_for("train").policy == "enforce" and s.policy_for("dev").policy == "off"
    assert s.policy_for("other").policy == "report" and s.policy_for("train").grace_s == 3


def test_invalid_settings_listed_together():
    with pytest.raises(ConfigError) as err:
        load_settings(NodeAgentSettings, {"SHOAL_ALL_FAKE_NODES": "true", "SHOAL_MEMORY_POLICY": "kill",
                                          "SHOAL_POOL_MEMORY_POLICIES": "x=maybe"})
    text = "\n".join(err.value.problems)
    assert "SHOAL_MEMORY_POLICY" in text
    with pytest.raises(ConfigError) as err2:
        load_settings(NodeAgentSettings, {"SHOAL_ALL_FAKE_NODES": "true", "SHOAL_POOL_MEMORY_POLICIES": "x=maybe"})
    text2 = "\n".join(err2.value.problems)
    assert "SHOAL_BACKEND=fake" in text2 and "x=maybe" in text2


def test_entry_point_exits_2_on_bad_settings():
    run = subprocess.run([sys.executable, "-m", "services.nodeagent"], env={"SHOAL_BACKEND": "gpu"},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "SHOAL_BACKEND" in run.stderr and "SHOAL_NODE_NAME" in run.stderr


def test_gpu_source_alias_as_deploy_sets_it():
    s = load_settings(NodeAgentSettings, {"SHOAL_NODE_NAME": "n", "SHOAL_GPU_SOURCE": "fake"})
    assert s.backend == "fake"
    assert load_settings(NodeAgentSettings, {"SHOAL_NODE_NAME": "n", "SHOAL_GPU_SOURCE": "fake",
                                             "SHOAL_BACKEND": "nvml"}).backend == "nvml"


def test_simulated_usage_from_annotations():
    from dataclasses import replace

    from services.nodeagent.app import simulated_usage

    from .helpers import pod

    running = pod("a", {"shoal.io/simulated-gpu-memory-mib": "3000", "run.ai/simulated-gpu-utilization": "10-30"})
    pending = replace(pod("b", {"shoal.io/simulated-gpu-memory-mib": "5"}), phase="Pending")
    bad = pod("c", {"shoal.io/simulated-gpu-memory-mib": "lots"})
    got = simulated_usage([running, pending, bad], {"uid-a": ("GPU-1",), "uid-b": ("GPU-2",), "uid-c": ("GPU-3",)})
    assert got == {("uid-a", "GPU-1"): (3000, 20)}

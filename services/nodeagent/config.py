"""The node agent's settings (`SHOAL_*` environment variables; invalid values → exit 2)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from msgspec import Meta

from services.nodeagent.memory_policy import POLICIES, PolicyConfig
from shoal.settings import GpuSharingServiceSettings, PositiveFloat, PositiveInt, doc

NonNegativeInt = Annotated[int, Meta(ge=0)]


class NodeAgentSettings(GpuSharingServiceSettings, frozen=True, kw_only=True):
    env_aliases: ClassVar[dict[str, str]] = {"backend": "SHOAL_GPU_SOURCE"}  # as deploy/k8s sets it

    node_name: Annotated[str, doc("the node served (DaemonSet: from the downward API); required unless "
                                  "SHOAL_ALL_FAKE_NODES")] = ""
    all_fake_nodes: Annotated[bool, doc("one process serves every node matching the fake-node selector")] = False
    fake_node_selector: Annotated[str, doc("label selector of the fake nodes")] = "shoal.io/fake-node=true"
    backend: Annotated[Literal["nvml", "fake"], doc("where GPUs are read: NVML, or a fake inventory")] = "nvml"
    fake_device_dir: Annotated[str, doc("fake backend: a directory on the node where the agent keeps which GPUs "
                                        "each whole-GPU pod holds (one file per node, like the kubelet's device "
                                        "checkpoint); unset: written to the pod as shoal.io/gpu-devices")] = ""
    memory_policy: Annotated[Literal["off", "report", "enforce"], doc("for pools not in the list below")] = "report"
    pool_memory_policies: Annotated[tuple[str, ...], doc("per pool: pool-a=enforce,pool-b=off")] = ()
    node_pool_label: Annotated[str, doc("node label naming a node's pool")] = "kai.scheduler/node-pool"
    grace_period_s: Annotated[float, Meta(ge=0), doc("over its share this long, a process is killed")] = 10.0
    sample_period_s: Annotated[PositiveFloat, doc("policy tick")] = 1.0
    parallel_nodes: Annotated[PositiveInt, doc("nodes ticked at once (one process, many fake nodes)")] = 16
    telemetry_period_s: Annotated[PositiveFloat, doc("how often GpuUsage goes to Kafka")] = 10.0
    release_timeout_s: Annotated[PositiveFloat, doc("wait for a killed process's memory before the next kill on "
                                                    "that GPU")] = 10.0
    context_allowance_mib: Annotated[NonNegativeInt, doc("per-process CUDA context allowance above a share")] = 0
    headroom_mib: Annotated[NonNegativeInt, doc("free memory reclaim keeps for a growing owner")] = 0
    dynamic_fractions: Annotated[bool, doc("reclaim borrowed memory (GPUOOMKiller)")] = True
    time_slicing_mode: Annotated[Literal["none", "strict", "fair"], doc("GPU time-slicing of shared GPUs")] = "none"
    mps_mode: Annotated[bool, doc("write MPS limits into fraction pods' env ConfigMaps")] = False
    swap_reserved_mib: Annotated[NonNegativeInt, doc("memory kept back from the shares on swap-enabled nodes")] = 2048
    proc_root: Annotated[str, doc("the host's /proc (the DaemonSet runs with hostPID)")] = "/proc"
    publish_telemetry: Annotated[bool, doc("GpuUsage on Kafka (metrics are always served)")] = True

    def pool_policies(self) -> dict[str, str]:
        out = {}
        for item in self.pool_memory_policies:
            pool, _, policy = item.partition("=")
            out[pool.strip()] = policy.strip()
        return out

    def policy_for(self, pool: str) -> PolicyConfig:
        return PolicyConfig(
            policy=self.pool_policies().get(pool, self.memory_policy),
            grace_s=self.grace_period_s,
            context_allowance_mib=self.context_allowance_mib,
            headroom_mib=self.headroom_mib,
            release_timeout_s=self.release_timeout_s,
            dynamic_fractions=self.dynamic_fractions,
        )

    def problems(self) -> list[str]:
        found = super().problems()
        if not self.all_fake_nodes and not self.node_name:
            found.append("SHOAL_NODE_NAME: required unless SHOAL_ALL_FAKE_NODES=true")
        if self.all_fake_nodes and self.backend != "fake":
            found.append("SHOAL_ALL_FAKE_NODES: needs SHOAL_BACKEND=fake")
        for item in self.pool_memory_policies:
            pool, sep, policy = item.partition("=")
            if not sep or not pool.strip() or policy.strip() not in POLICIES:
                found.append(f"SHOAL_POOL_MEMORY_POLICIES: {item!r} is not <pool>=off|report|enforce")
        return found

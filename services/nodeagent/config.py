"""The node agent's settings (`SHOAL_*` environment variables; invalid values → exit 2)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from msgspec import Meta

from services.nodeagent.memory_policy import POLICIES, PolicyConfig
from shoal.settings import PositiveFloat, PositiveInt, ServiceSettings

NonNegativeInt = Annotated[int, Meta(ge=0)]


class NodeAgentSettings(ServiceSettings, frozen=True, kw_only=True):
    env_aliases: ClassVar[dict[str, str]] = {"backend": "SHOAL_GPU_SOURCE"}  # as deploy/k8s sets it

    node_name: str = ""  # SHOAL_NODE_NAME: the node this agent serves (DaemonSet: from the downward API)
    all_fake_nodes: bool = False  # SHOAL_ALL_FAKE_NODES: one process serves every node matching the selector
    fake_node_selector: str = "shoal.io/fake-node=true"  # SHOAL_FAKE_NODE_SELECTOR (label selector)
    backend: Literal["nvml", "fake"] = "nvml"  # SHOAL_BACKEND
    reservation_namespace: str = "kai-resource-reservation"  # SHOAL_RESERVATION_NAMESPACE (shared with binder)
    memory_policy: Literal["off", "report", "enforce"] = "report"  # SHOAL_MEMORY_POLICY: default for pools
    pool_memory_policies: tuple[str, ...] = ()  # SHOAL_POOL_MEMORY_POLICIES=pool-a=enforce,pool-b=off
    node_pool_label: str = "kai.scheduler/node-pool"
    grace_period_s: Annotated[float, Meta(ge=0)] = 10.0  # SHOAL_GRACE_PERIOD_S: over share this long → kill
    sample_period_s: PositiveFloat = 1.0  # SHOAL_SAMPLE_PERIOD_S: policy tick
    parallel_nodes: PositiveInt = 16  # SHOAL_PARALLEL_NODES: nodes ticked at once (one process, many fake nodes)
    telemetry_period_s: PositiveFloat = 10.0  # SHOAL_TELEMETRY_PERIOD_S: GpuUsage on Kafka
    release_timeout_s: PositiveFloat = 10.0
    context_allowance_mib: NonNegativeInt = 0  # per-process CUDA context allowance above a share
    headroom_mib: NonNegativeInt = 0  # free memory reclaim keeps for a growing owner
    dynamic_fractions: bool = True  # SHOAL_DYNAMIC_FRACTIONS: reclaim borrowed memory (GPUOOMKiller)
    time_slicing_mode: Literal["none", "strict", "fair"] = "none"  # SHOAL_TIME_SLICING_MODE
    mps_mode: bool = False  # SHOAL_MPS_MODE: write MPS limits into fraction pods' env ConfigMaps
    swap_reserved_mib: NonNegativeInt = 2048
    proc_root: str = "/proc"  # host /proc (the DaemonSet runs with hostPID)
    publish_telemetry: bool = True  # SHOAL_PUBLISH_TELEMETRY: GpuUsage on Kafka (metrics are always served)

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
        found = []
        if not self.all_fake_nodes and not self.node_name:
            found.append("SHOAL_NODE_NAME: required unless SHOAL_ALL_FAKE_NODES=true")
        if self.all_fake_nodes and self.backend != "fake":
            found.append("SHOAL_ALL_FAKE_NODES: needs SHOAL_BACKEND=fake")
        for item in self.pool_memory_policies:
            pool, sep, policy = item.partition("=")
            if not sep or not pool.strip() or policy.strip() not in POLICIES:
                found.append(f"SHOAL_POOL_MEMORY_POLICIES: {item!r} is not <pool>=off|report|enforce")
        return found

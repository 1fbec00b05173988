"""GPU usage telemetry on `shoal.gpu-usage.v1` (keyed by node): one message per node and period from the
node agent, with every GPU and every pod share on it. The fairshare service or a dashboard may consume it."""

from __future__ import annotations

import msgspec

from shoal.messages.base import Message


class MigStat(msgspec.Struct, frozen=True, kw_only=True):
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    memory_total_mib: int
    memory_used_mib: int = 0


class GpuStat(msgspec.Struct, frozen=True, kw_only=True):
    uuid: str
    index: int
    name: str
    memory_total_mib: int
    memory_used_mib: int
    capacity_mib: int  # what shares may use: total, or total minus the swap reserve
    utilization_percent: int | None = None
    mig_enabled: bool = False
    mig_instances: tuple[MigStat, ...] = ()
    holder: str = ""  # ns/name of the reservation or whole-GPU pod holding it


class PodGpuStat(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    pod: str
    pod_uid: str
    gpu_uuid: str
    memory_used_mib: int
    memory_request_mib: int
    memory_limit_mib: int
    fraction: float | None = None
    over_share_mib: int = 0
    utilization_percent: int = 0
    compute_share: float | None = None  # of the time-slicing plan, when one runs


class GpuUsage(Message, frozen=True, kw_only=True, tag="GpuUsage"):
    node: str
    node_pool: str = ""
    sampled_at: str = ""
    partial: bool = False
    gpus: tuple[GpuStat, ...] = ()
    pods: tuple[PodGpuStat, ...] = ()

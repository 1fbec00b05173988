"""The GPU inventory interface: what the agent reads from a node's GPUs, behind one Protocol.

Two backends implement it: `nvml_backend.NvmlInventory` (nvidia-ml-py on a real node) and
`fake_backend.FakeInventory` (deterministic GPUs derived from a fake node's labels, with
simulated processes). Values are frozen dataclasses; memory is in MiB, utilization in percent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

MIB = 1024 * 1024


@dataclass(frozen=True)
class MigInstance:
    uuid: str
    parent_uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    memory_total_mib: int
    memory_used_mib: int = 0


@dataclass(frozen=True)
class Gpu:
    uuid: str
    index: int
    name: str
    memory_total_mib: int
    memory_used_mib: int = 0
    utilization_percent: int | None = None
    mig_enabled: bool = False
    mig_instances: tuple[MigInstance, ...] = ()
    exclusive_process: bool = False  # compute mode EXCLUSIVE_PROCESS: an MPS daemon owns the GPU


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU.

    `start_ticks` is field 22 of /proc/<pid>/stat (clock ticks since boot); together with the pid it
    identifies the process, so a reused pid never matches an old decision. `used_mib` is None when
    NVML reports the value as not available. `pod_uid`/`container_id` are filled only by backends
    that know them (the fake backend); NVML leaves them empty and procmap resolves them.
    """

    pid: int
    gpu_uuid: str
    used_mib: int | None
    start_ticks: int
    sm_util_percent: int | None = None
    pod_uid: str = ""
    container_id: str = ""


@dataclass(frozen=True)
class InventorySample:
    gpus: tuple[Gpu, ...]
    processes: tuple[GpuProcess, ...]
    partial: bool = False  # an NVML call failed: report, but never kill on this sample
    errors: tuple[str, ...] = field(default_factory=tuple)


class NoSuchProcess(LookupError):
    """The process to kill is gone (or is now a different process)."""


class GpuInventory(Protocol):
    """One node's GPUs."""

    def sample(self) -> InventorySample:
        """Devices, memory, utilization and GPU processes as of now."""
        ...

    def kill(self, pid: int, start_ticks: int) -> None:
        """SIGKILL `pid` if it is still the process started at `start_ticks`; else NoSuchProcess."""
        ...

    def close(self) -> None: ...

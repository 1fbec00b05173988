"""The GPU inventory of a real node, through nvidia-ml-py (`pynvml`, the optional extra `nvml`).

Every NVML call is wrapped: a failing call marks the sample `partial` (the agent then reports but
never kills) instead of crashing the agent. Memory is converted from bytes to MiB; a process whose
`usedGpuMemory` NVML reports as not available keeps `used_mib=None`. Processes are listed from both
`nvmlDeviceGetComputeRunningProcesses` and `nvmlDeviceGetMPSComputeRunningProcesses` (MPS clients).
Start times come from /proc (`procmap.ProcFs`), since NVML has none; kills go through `SignalKiller`,
which re-checks the start time first.

The `nvml` argument is the `pynvml` module; tests of the translation logic pass a scripted stand-in
(no GPU exists on CI machines), and tests/gpu/ exercises the real library on a real GPU.
"""

from __future__ import annotations

import importlib
from typing import Any

from services.nodeagent.inventory import MIB, Gpu, GpuProcess, InventorySample, MigInstance
from services.nodeagent.procmap import ProcFs, SignalKiller

EXCLUSIVE_PROCESS = 3  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
MIG_ENABLED = 1  # NVML_DEVICE_MIG_ENABLE


def load_pynvml() -> Any:
    """Import pynvml, with a clear message when the `nvml` extra is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise RuntimeError("backend nvml needs nvidia-ml-py: install shoal with the 'nvml' extra") from exc


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlInventory:
    """GpuInventory over NVML. Call `close()` to shut NVML down."""

    def __init__(self, nvml: Any | None = None, procfs: ProcFs | None = None) -> None:
        self.nvml = nvml if nvml is not None else load_pynvml()
        self.procfs = procfs or ProcFs()
        self.killer = SignalKiller(self.procfs)
        self.nvml.nvmlInit()
        self._last_seen_us: dict[str, int] = {}

    def _call(self, errors: list[str], what: str, fn: Any, *args: Any, default: Any = None) -> Any:
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            errors.append(f"{what}: {exc}")
            return default

    def _optional(self, fn: Any, *args: Any, default: Any = None) -> Any:
        """A call that legitimately fails on some devices (NotSupported, NotFound): no partial mark."""
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return default

    def _mig(self, handle: Any, parent_uuid: str) -> tuple[bool, tuple[MigInstance, ...], list[Any]]:
        n = self.nvml
        mode = self._optional(n.nvmlDeviceGetMigMode, handle)
        if not mode or mode[0] != MIG_ENABLED:
            return False, (), []
        out = []
        handles = []
        for i in range(self._optional(n.nvmlDeviceGetMaxMigDeviceCount, handle, default=0) or 0):
            mig = self._optional(n.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)
            if mig is None:
                continue  # empty slot
            handles.append(mig)
            memory = self._optional(n.nvmlDeviceGetMemoryInfo, mig)
            out.append(
                MigInstance(
                    uuid=_text(self._optional(n.nvmlDeviceGetUUID, mig, default="")),
                    parent_uuid=parent_uuid,
                    gpu_instance_id=int(self._optional(n.nvmlDeviceGetGpuInstanceId, mig, default=-1)),
                    compute_instance_id=int(self._optional(n.nvmlDeviceGetComputeInstanceId, mig, default=-1)),
                    memory_total_mib=int(memory.total // MIB) if memory else 0,
                    memory_used_mib=int(memory.used // MIB) if memory else 0,
                )
            )
        return True, tuple(out), handles

    def _processes(self, handle: Any, gpu_uuid: str, errors: list[str]) -> list[GpuProcess]:
        n = self.nvml
        raw = list(self._call(errors, "compute processes", n.nvmlDeviceGetComputeRunningProcesses, handle,
                              default=[]) or [])
        raw += list(self._optional(n.nvmlDeviceGetMPSComputeRunningProcesses, handle, default=[]) or [])
        util: dict[int, int] = {}
        samples = self._optional(n.nvmlDeviceGetProcessUtilization, handle, self._last_seen_us.get(gpu_uuid, 0),
                                 default=[]) or []
        for s in samples:
            util[int(s.pid)] = max(util.get(int(s.pid), 0), int(s.smUtil))
            self._last_seen_us[gpu_uuid] = max(self._last_seen_us.get(gpu_uuid, 0), int(s.timeStamp))
        seen: dict[int, GpuProcess] = {}
        for p in raw:
            pid = int(p.pid)
            start = self.procfs.start_ticks(pid)
            if start is None or pid in seen:
                continue  # exited meanwhile, or listed twice (compute and MPS)
            used = p.usedGpuMemory
            seen[pid] = GpuProcess(
                pid=pid,
                gpu_uuid=gpu_uuid,
                used_mib=int(used // MIB) if used is not None else None,
                start_ticks=start,
                sm_util_percent=util.get(pid),
            )
        return list(seen.values())

    def sample(self) -> InventorySample:
        n = self.nvml
        errors: list[str] = []
        gpus: list[Gpu] = []
        processes: list[GpuProcess] = []
        count = self._call(errors, "device count", n.nvmlDeviceGetCount, default=0) or 0
        for index in range(count):
            handle = self._call(errors, f"handle {index}", n.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                continue
            uuid = self._call(errors, f"uuid {index}", n.nvmlDeviceGetUUID, handle)
            if uuid is None:
                continue
            uuid = _text(uuid)
            memory = self._call(errors, f"memory {uuid}", n.nvmlDeviceGetMemoryInfo, handle)
            rates = self._optional(n.nvmlDeviceGetUtilizationRates, handle)
            mig_enabled, instances, mig_handles = self._mig(handle, uuid)
            mode = self._optional(n.nvmlDeviceGetComputeMode, handle)
            gpus.append(
                Gpu(
                    uuid=uuid,
                    index=index,
                    name=_text(self._optional(n.nvmlDeviceGetName, handle, default="")),
                    memory_total_mib=int(memory.total // MIB) if memory else 0,
                    memory_used_mib=int(memory.used // MIB) if memory else 0,
                    utilization_percent=int(rates.gpu) if rates is not None else None,
                    mig_enabled=mig_enabled,
                    mig_instances=instances,
                    exclusive_process=mode == EXCLUSIVE_PROCESS,
                )
            )
            for h in [handle, *mig_handles]:  # MIG: processes are listed per MIG device
                processes += self._processes(h, uuid, errors)
        unique = {p.pid: p for p in reversed(processes)}  # a MIG parent and its instance list the same pid
        return InventorySample(
            gpus=tuple(gpus),
            processes=tuple(sorted(unique.values(), key=lambda p: p.pid)),
            partial=bool(errors),
            errors=tuple(errors),
        )

    def kill(self, pid: int, start_ticks: int) -> None:
        self.killer.kill(pid, start_ticks)

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

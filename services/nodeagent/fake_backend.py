"""A GPU inventory for fake nodes: deterministic GPUs from node labels, simulated processes.

GPUs exist nowhere here, so this backend *is* the node's hardware for fake nodes:
- count: allocatable `nvidia.com/gpu`, else label `nvidia.com/gpu.count`;
- memory: label `nvidia.com/gpu.memory` (MiB), else 81920;
- product: label `nvidia.com/gpu.product`, else "NVIDIA-Fake-GPU";
- MIG: label `nvidia.com/mig.strategy` in (single, mixed) or `node-role.kubernetes.io/mig-enabled=true`;
- UUID: `GPU-<uuid5(namespace, "<node>/<index>")>`, stable across restarts and processes.
Processes are simulated (`start_process`/`stop_process`); `kill` removes one, like SIGKILL would.
`sync_simulated` keeps one process per (pod, GPU) for pods that ask for it by annotation (see app.py), so
an agent running as its own process on the local stack has GPU usage to report and police; a killed
simulated process stays dead until the pod goes away.
"""

from __future__ import annotations

import threading
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, replace

from services.nodeagent.inventory import Gpu, GpuProcess, InventorySample, MigInstance, NoSuchProcess

FAKE_UUID_NAMESPACE = uuid.UUID("8f6b6a52-0a0e-5c55-9a31-5a3d8d6f0c11")
DEFAULT_MEMORY_MIB = 81920
DEFAULT_PRODUCT = "NVIDIA-Fake-GPU"


def fake_gpu_uuid(node_name: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(FAKE_UUID_NAMESPACE, f'{node_name}/{index}')}"


def _int(text: object, default: int) -> int:
    try:
        value = int(str(text))
    except (TypeError, ValueError):
        return default
    return value if value >= 0 else default


def is_mig_node(labels: Mapping[str, str]) -> bool:
    return labels.get("nvidia.com/mig.strategy") in ("single", "mixed") or (
        labels.get("node-role.kubernetes.io/mig-enabled") == "true"
    )


def gpus_for_node(node_name: str, labels: Mapping[str, str], allocatable: Mapping[str, str]) -> tuple[Gpu, ...]:
    """The fake node's GPUs, derived only from its name, labels and allocatable (pure)."""
    count = _int(allocatable.get("nvidia.com/gpu"), -1)
    if count < 0:
        count = _int(labels.get("nvidia.com/gpu.count"), 0)
    memory = _int(labels.get("nvidia.com/gpu.memory"), DEFAULT_MEMORY_MIB) or DEFAULT_MEMORY_MIB
    product = labels.get("nvidia.com/gpu.product") or DEFAULT_PRODUCT
    mig = is_mig_node(labels)
    gpus = []
    for index in range(count):
        gpu_uuid = fake_gpu_uuid(node_name, index)
        instances: tuple[MigInstance, ...] = ()
        if mig:
            # Two half-size instances per GPU, as a 2g-style layout; enough to report MIG devices.
            instances = tuple(
                MigInstance(
                    uuid=f"MIG-{uuid.uuid5(FAKE_UUID_NAMESPACE, f'{node_name}/{index}/mig/{gi}')}",
                    parent_uuid=gpu_uuid,
                    gpu_instance_id=gi,
                    compute_instance_id=0,
                    memory_total_mib=memory // 2,
                )
                for gi in (1, 2)
            )
        gpus.append(
            Gpu(
                uuid=gpu_uuid,
                index=index,
                name=product,
                memory_total_mib=memory,
                mig_enabled=mig,
                mig_instances=instances,
            )
        )
    return tuple(gpus)


@dataclass
class _Proc:
    process: GpuProcess
    utilization_percent: int


class FakeInventory:
    """The GpuInventory of one fake node. Thread-safe: tests drive it while the agent samples it."""

    def __init__(self, node_name: str, gpus: tuple[Gpu, ...]) -> None:
        self.node_name = node_name
        self._gpus = gpus
        self._idle = self._idle_samples(gpus)
        self._procs: dict[int, _Proc] = {}
        self._lock = threading.Lock()
        self.killed: list[tuple[int, int]] = []  # (pid, start_ticks), in kill order
        self._simulated: dict[tuple[str, str], int] = {}  # (pod uid, gpu) → pid
        self._simulated_dead: set[tuple[str, str]] = set()

    @classmethod
    def for_node(
        cls, node_name: str, labels: Mapping[str, str], allocatable: Mapping[str, str]
    ) -> FakeInventory:
        return cls(node_name, gpus_for_node(node_name, labels, allocatable))

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        return self._gpus

    def set_gpus(self, gpus: tuple[Gpu, ...]) -> None:
        """The node's labels changed: keep processes of GPUs that still exist."""
        with self._lock:
            self._gpus = gpus
            self._idle = self._idle_samples(gpus)
            known = {g.uuid for g in gpus}
            self._procs = {pid: p for pid, p in self._procs.items() if p.process.gpu_uuid in known}

    @staticmethod
    def _idle_samples(gpus: tuple[Gpu, ...]) -> dict[str, Gpu]:
        """Each GPU as sampled with no process on it (most GPUs, most ticks: made once, not every tick)."""
        return {g.uuid: replace(g, memory_used_mib=0, utilization_percent=0) for g in gpus}

    def start_process(
        self,
        *,
        pid: int,
        gpu_uuid: str,
        used_mib: int | None,
        start_ticks: int,
        pod_uid: str = "",
        container_id: str = "",
        utilization_percent: int = 0,
    ) -> GpuProcess:
        with self._lock:
            if gpu_uuid not in {g.uuid for g in self._gpus}:
                raise KeyError(f"no GPU {gpu_uuid} on fake node {self.node_name}")
            process = GpuProcess(
                pid=pid,
                gpu_uuid=gpu_uuid,
                used_mib=used_mib,
                start_ticks=start_ticks,
                sm_util_percent=utilization_percent,
                pod_uid=pod_uid,
                container_id=container_id,
            )
            self._procs[pid] = _Proc(process, utilization_percent)
            return process

    def set_used(self, pid: int, used_mib: int) -> None:
        with self._lock:
            proc = self._procs[pid]
            proc.process = replace(proc.process, used_mib=used_mib)

    def stop_process(self, pid: int) -> None:
        with self._lock:
            self._procs.pop(pid, None)

    def sample(self) -> InventorySample:
        with self._lock:
            processes = tuple(sorted((p.process for p in self._procs.values()), key=lambda p: p.pid))
            gpus = []
            for gpu in self._gpus:
                mine = [p for p in processes if p.gpu_uuid == gpu.uuid]
                if not mine:
                    gpus.append(self._idle[gpu.uuid])
                    continue
                used = sum(p.used_mib or 0 for p in mine)
                util = min(100, sum(self._procs[p.pid].utilization_percent for p in mine))
                gpus.append(replace(gpu, memory_used_mib=min(used, gpu.memory_total_mib), utilization_percent=util))
            return InventorySample(gpus=tuple(gpus), processes=processes)

    def kill(self, pid: int, start_ticks: int) -> None:
        with self._lock:
            proc = self._procs.get(pid)
            if proc is None or proc.process.start_ticks != start_ticks:
                raise NoSuchProcess(f"pid {pid} (start {start_ticks}) is not running")
            del self._procs[pid]
            self.killed.append((pid, start_ticks))
            for key, sim_pid in list(self._simulated.items()):
                if sim_pid == pid:
                    del self._simulated[key]
                    self._simulated_dead.add(key)

    def sync_simulated(self, wanted: dict[tuple[str, str], tuple[int, int]]) -> None:
        """Make the simulated processes match `wanted`: (pod uid, GPU uuid) → (used MiB, utilization %)."""
        known = {g.uuid for g in self._gpus}
        for key in [k for k in self._simulated if k not in wanted]:
            self.stop_process(self._simulated.pop(key))
        self._simulated_dead &= set(wanted)
        for (pod_uid, gpu_uuid), (used, util) in sorted(wanted.items()):
            key = (pod_uid, gpu_uuid)
            if key in self._simulated_dead or gpu_uuid not in known:
                continue
            pid = self._simulated.get(key)
            if pid is not None and pid in self._procs:
                with self._lock:
                    proc = self._procs[pid]
                    proc.process = replace(proc.process, used_mib=used, sm_util_percent=util)
                    proc.utilization_percent = util
                continue
            pid = 100_000 + zlib.crc32(f"{pod_uid}/{gpu_uuid}".encode()) % 800_000
            while pid in self._procs:
                pid += 1
            self.start_process(pid=pid, gpu_uuid=gpu_uuid, used_mib=used, start_ticks=pid * 7, pod_uid=pod_uid,
                               utilization_percent=util)
            self._simulated[key] = pid

    def close(self) -> None:
        return None

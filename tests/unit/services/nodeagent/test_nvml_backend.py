"""NvmlInventory's translation of NVML answers, with a scripted stand-in for the pynvml module.

No GPU exists on CI machines; tests/gpu/check_gpu.py runs the real library on a real GPU.
"""

from types import SimpleNamespace as NS

from services.nodeagent.nvml_backend import NvmlInventory
from services.nodeagent.procmap import ProcFs

from .test_procmap import CASES, make_proc

GIB = 1024**3


class NVMLError(Exception):
    pass


class ScriptedNvml:
    """Answers like pynvml for two GPUs: GPU 0 plain with processes, GPU 1 MIG-enabled with one instance."""

    NVMLError = NVMLError

    def __init__(self, fail_memory=False):
        self.fail_memory = fail_memory
        self.calls = []

    def nvmlInit(self):
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"h{i}"

    def nvmlDeviceGetUUID(self, h):
        return {"h0": b"GPU-aaa", "h1": "GPU-bbb", "m1": "MIG-ccc"}[h]

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h):
        if self.fail_memory and h == "h0":
            raise NVMLError("GPU is lost")
        return NS(total=80 * GIB, used=(5 if h == "h0" else 1) * GIB, free=0)

    def nvmlDeviceGetUtilizationRates(self, h):
        return NS(gpu=37, memory=5)

    def nvmlDeviceGetMigMode(self, h):
        if h == "h0":
            raise NVMLError("Not Supported")
        return [1, 1]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 3

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, i):
        if i != 1:
            raise NVMLError("Not Found")
        return "m1"

    def nvmlDeviceGetGpuInstanceId(self, m):
        return 2

    def nvmlDeviceGetComputeInstanceId(self, m):
        return 0

    def nvmlDeviceGetComputeMode(self, h):
        return 3 if h == "h0" else 0

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return {"h0": [NS(pid=100, usedGpuMemory=3 * GIB), NS(pid=999, usedGpuMemory=GIB)],
                "h1": [NS(pid=300, usedGpuMemory=GIB)], "m1": [NS(pid=300, usedGpuMemory=GIB)]}[h]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h):
        if h == "h0":
            return [NS(pid=200, usedGpuMemory=None)]
        raise NVMLError("Not Supported")

    def nvmlDeviceGetProcessUtilization(self, h, last):
        if h != "h0":
            raise NVMLError("Not Found")
        return [NS(pid=100, smUtil=61, memUtil=3, timeStamp=12345)]


def test_inventory_translation(tmp_path):
    for pid, start in ((100, 11), (200, 22), (300, 33)):  # pid 999 has exited: not in /proc
        make_proc(tmp_path, pid, CASES[0][1], start)
    nvml = ScriptedNvml()
    inv = NvmlInventory(nvml, ProcFs(tmp_path))
    sample = inv.sample()
    assert not sample.partial
    g0, g1 = sample.gpus
    assert (g0.uuid, g0.memory_total_mib, g0.memory_used_mib, g0.utilization_percent) == ("GPU-aaa", 81920, 5120, 37)
    assert g0.exclusive_process and not g0.mig_enabled
    assert g1.mig_enabled and [(m.uuid, m.gpu_instance_id, m.memory_total_mib) for m in g1.mig_instances] == [
        ("MIG-ccc", 2, 81920)]
    procs = {p.pid: p for p in sample.processes}
    assert sorted(procs) == [100, 200, 300]
    assert (procs[100].used_mib, procs[100].start_ticks, procs[100].sm_util_percent) == (3072, 11, 61)
    assert procs[200].used_mib is None  # NVML's "not available" stays unknown, never 0
    assert procs[300].gpu_uuid == "GPU-bbb"
    inv.close()
    assert nvml.calls == ["init", "shutdown"]


def test_failed_call_marks_sample_partial(tmp_path):
    inv = NvmlInventory(ScriptedNvml(fail_memory=True), ProcFs(tmp_path))
    sample = inv.sample()
    assert sample.partial and "GPU is lost" in sample.errors[0]
    assert len(sample.gpus) == 2

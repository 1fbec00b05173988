#!/usr/bin/env python3
"""Real-GPU check of the node agent's NVML paths (gpu-sharing.md §6.2–§6.3). NOT run in CI: no GPU there.

    python3 tests/gpu/check_gpu.py --out "$OUT" [--steps p0,p1,p2,p3,p4,p5] [--pynvml-path DIR]

Needs: one NVIDIA GPU, root, Python ≥ 3.11, libcuda.so.1, nvidia-ml-py (`pynvml`; pass --pynvml-path if it
was carried in, e.g. `uv pip install --target .gpu-deps nvidia-ml-py`), and for p3/p5 `nvidia-cuda-mps-control`.
Uses only the stdlib + ctypes for CUDA (the kernel is PTX text, JIT-compiled by the driver) and the agent's own
`NvmlInventory`, `ProcFs` and `SignalKiller`. Changes no device setting: MPS runs with a private pipe dir and
is always told to quit. Writes `<out>/gpu-check.json`; exit 0 when every step that ran passed.

Steps: p0 inventory through NvmlInventory; p1 per-process memory attribution (1/4/16 GiB children);
p2 policing: a child over a 4 GiB share is SIGKILLed via SignalKiller, a child within its share is not;
p3 MPS `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4G`: 3 GiB ok, 2 GiB more fails with OOM;
p4 default time-slicing of two spinning processes ≈ 1:1; p5 MPS `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` 25/75 ≈ 1:3.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("p0", "p1", "p2", "p3", "p4", "p5")
GIB = 1024**3
CUDA_ERROR_OUT_OF_MEMORY = 2

SPIN_PTX = r"""
.version 7.0
.target sm_80
.address_size 64
.visible .entry spin(.param .u64 out, .param .u32 iters)
{
  .reg .pred p;
  .reg .b32 r<6>;
  .reg .b64 rd<4>;
  .reg .f32 f<2>;
  ld.param.u64 rd1, [out];
  ld.param.u32 r1, [iters];
  mov.u32 r2, 0;
  mov.f32 f1, 0f3F800000;
LOOP:
  fma.rn.f32 f1, f1, 0f3F7FFFFF, 0f3A83126F;
  add.u32 r2, r2, 1;
  setp.lt.u32 p, r2, r1;
  @p bra LOOP;
  mov.u32 r3, %tid.x;
  mov.u32 r4, %ctaid.x;
  mov.u32 r5, %ntid.x;
  mad.lo.u32 r3, r4, r5, r3;
  mul.wide.u32 rd2, r3, 4;
  add.s64 rd3, rd1, rd2;
  st.global.f32 [rd3], f1;
  ret;
}
"""


# ----- pure parts (tested in CI: tests/unit/services/nodeagent/test_gpu_check.py) ------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Real-GPU check of the Shoal node agent")
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-check-out")
    parser.add_argument("--steps", default=",".join(STEPS), help="comma-separated subset of " + ",".join(STEPS))
    parser.add_argument("--pynvml-path", default=None, help="directory holding a carried pynvml.py")
    parser.add_argument("--spin-seconds", type=float, default=15.0)
    parser.add_argument("--worker", choices=("alloc", "spin"), help=argparse.SUPPRESS)
    parser.add_argument("--gib", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument("--then-gib", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        parser.error(f"unknown steps: {', '.join(unknown)}")
    args.steps = steps
    return args


def evaluate_p1(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """NVML must attribute each child's allocation to its pid: used − requested is the context overhead."""
    overheads = []
    ok = bool(samples)
    for s in samples:
        if s.get("used_mib") is None:
            ok = False
            continue
        overhead = s["used_mib"] - int(s["gib"] * 1024)
        overheads.append(overhead)
        ok = ok and 0 <= overhead <= 1024 and s.get("start_ticks_match", False)
    return {"pass": ok, "context_overhead_mib": max(overheads) if overheads else None}


def evaluate_p2(result: dict[str, Any]) -> dict[str, Any]:
    ok = (result.get("killed_pid") == result.get("offender_pid") and result.get("samples_to_kill", 99) <= 2
          and result.get("freed_after_s", 99.0) <= 2.0 and result.get("within_share_alive") is True)
    return {"pass": bool(ok)}


def evaluate_p3(result: dict[str, Any]) -> dict[str, Any]:
    ok = result.get("first_rc") == 0 and result.get("second_rc") == CUDA_ERROR_OUT_OF_MEMORY and result.get(
        "survived") is True
    return {"pass": bool(ok)}


def evaluate_ratio(counts: list[int], expected: float, low: float, high: float) -> dict[str, Any]:
    """Throughput ratio counts[1]/counts[0] against `expected` (e.g. 1.0 or 3.0) within [low, high]."""
    if len(counts) != 2 or min(counts) <= 0:
        return {"pass": False, "ratio": None, "expected": expected}
    ratio = counts[1] / counts[0]
    return {"pass": low <= ratio <= high, "ratio": round(ratio, 3), "expected": expected}


def summarize(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ran = {k: v for k, v in results.items() if "pass" in v}
    return {"passed": sorted(k for k, v in ran.items() if v["pass"]),
            "failed": sorted(k for k, v in ran.items() if not v["pass"]),
            "ok": bool(ran) and all(v["pass"] for v in ran.values())}


# ----- CUDA through ctypes (workers run in child processes) ---------------------------------------------------
class Cuda:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.check(self.lib.cuInit(0), "cuInit")
        self.dev = ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(self.dev), 0), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), self.dev), "cuDevicePrimaryCtxRetain")
        self.check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    @staticmethod
    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    def alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_uint64()
        return int(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))

    def sm_count(self) -> int:
        value = ctypes.c_int()
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(value), 16, self.dev), "sm count")
        return value.value


def worker_alloc(gib: float, then_gib: float) -> None:
    cuda = Cuda()
    rc = cuda.alloc(int(gib * GIB))
    print(json.dumps({"event": "allocated", "rc": rc, "pid": os.getpid()}), flush=True)
    if then_gib:
        rc2 = cuda.alloc(int(then_gib * GIB))
        print(json.dumps({"event": "allocated2", "rc": rc2}), flush=True)
    sys.stdin.readline()  # hold the memory until the parent says so (or kills us)


def worker_spin(seconds: float) -> None:
    cuda = Cuda()
    module, fn = ctypes.c_void_p(), ctypes.c_void_p()
    cuda.check(cuda.lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(SPIN_PTX.encode())), "load ptx")
    cuda.check(cuda.lib.cuModuleGetFunction(ctypes.byref(fn), module, b"spin"), "get function")
    blocks, threads = cuda.sm_count() * 4, 256
    out = ctypes.c_uint64()
    cuda.check(cuda.lib.cuMemAlloc_v2(ctypes.byref(out), ctypes.c_size_t(blocks * threads * 4)), "alloc out")
    iters = ctypes.c_uint32(20000)
    params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(out), ctypes.c_void_p),
                                   ctypes.cast(ctypes.byref(iters), ctypes.c_void_p))
    print(json.dumps({"event": "ready"}), flush=True)
    sys.stdin.readline()  # start together with the other worker
    count, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        cuda.check(cuda.lib.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, None, params, None), "launch")
        cuda.check(cuda.lib.cuCtxSynchronize(), "sync")
        count += 1
    print(json.dumps({"event": "done", "launches": count}), flush=True)


# ----- steps (parent) -------------------------------------------------------------------------------------------
def spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})})


def read_event(proc: subprocess.Popen[str]) -> dict[str, Any]:
    line = proc.stdout.readline() if proc.stdout else ""
    if not line:
        raise RuntimeError(f"worker {proc.pid} ended early (rc {proc.poll()})")
    return json.loads(line)


def release(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        try:
            proc.stdin.write("\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
            proc.wait(timeout=10)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            proc.kill()


def used_by(inventory: Any, pid: int, tries: int = 20) -> Any:
    for _ in range(tries):
        for p in inventory.sample().processes:
            if p.pid == pid:
                return p
        time.sleep(0.25)
    return None


def step_p0(inventory: Any) -> dict[str, Any]:
    sample = inventory.sample()
    mps = shutil.which("nvidia-cuda-mps-control")
    return {
        "pass": bool(sample.gpus) and not sample.partial and all(g.uuid.startswith("GPU-") for g in sample.gpus),
        "gpus": [{"uuid": g.uuid, "name": g.name, "total_mib": g.memory_total_mib, "mig": g.mig_enabled,
                  "exclusive_process": g.exclusive_process} for g in sample.gpus],
        "driver": inventory.nvml.nvmlSystemGetDriverVersion(),
        "cgroup_v2": Path("/sys/fs/cgroup/cgroup.controllers").exists(),
        "dmem": Path("/sys/fs/cgroup/dmem.capacity").exists(),
        "mps_control": mps,
        "errors": list(sample.errors),
    }


def step_p1(inventory: Any, procfs: Any) -> dict[str, Any]:
    samples = []
    for gib in (1, 4, 16):
        child = spawn(["--worker", "alloc", "--gib", str(gib)])
        try:
            event = read_event(child)
            proc = used_by(inventory, child.pid) if event["rc"] == 0 else None
            samples.append({"gib": gib, "rc": event["rc"], "used_mib": proc.used_mib if proc else None,
                            "start_ticks_match": bool(proc) and proc.start_ticks == procfs.start_ticks(child.pid)})
        finally:
            release(child)
    return {**evaluate_p1(samples), "samples": samples}


def step_p2(inventory: Any) -> dict[str, Any]:
    """The agent's memory policy + SignalKiller against real processes: a 6 GiB child on a 4 GiB share."""
    sys.path[:0] = [str(ROOT), str(ROOT / "libs" / "common")]
    from services.nodeagent.binding import GpuBinding, attribute
    from services.nodeagent.memory_policy import Kill, PolicyConfig, PolicyState, evaluate
    from services.nodeagent.procmap import ContainerRef
    from services.nodeagent.shares import ShareSpec

    offender, fine = spawn(["--worker", "alloc", "--gib", "6"]), spawn(["--worker", "alloc", "--gib", "2"])
    try:
        read_event(offender), read_event(fine)
        gpu = inventory.sample().gpus[0]
        shares = tuple(ShareSpec(pod_uid=f"pod-{n}", pod_key=f"check/{n}", mem_request_mib=4096, mem_limit_mib=4096,
                                 compute_request=0, compute_limit=1, priority=0, created="", fraction=None)
                       for n in ("offender", "fine"))  # type: ignore[arg-type]
        refs = {offender.pid: ContainerRef("pod-offender", ""), fine.pid: ContainerRef("pod-fine", "")}
        binding = GpuBinding(gpu.uuid, gpu.memory_total_mib, shares)
        state, killed, samples, config = PolicyState(), None, 0, PolicyConfig(policy="enforce", grace_s=0,
                                                                              context_allowance_mib=1024)
        while killed is None and samples < 5:
            samples += 1
            sample = inventory.sample()
            outcome = evaluate([binding], attribute(sample.processes, refs, [binding]), state, time.monotonic(),
                               config, partial=sample.partial)
            state = outcome.state
            for d in outcome.decisions:
                if isinstance(d, Kill):
                    before = time.monotonic()
                    inventory.kill(d.pid, d.start_ticks)
                    killed = d.pid
            time.sleep(1.0 if killed is None else 0)
        freed_after = None
        while killed is not None and freed_after is None and time.monotonic() - before < 5:
            if all(p.pid != killed for p in inventory.sample().processes):
                freed_after = time.monotonic() - before
            time.sleep(0.1)
        result = {"offender_pid": offender.pid, "killed_pid": killed, "samples_to_kill": samples,
                  "freed_after_s": freed_after if freed_after is not None else 99.0,
                  "within_share_alive": fine.poll() is None}
    finally:
        release(offender), release(fine)
    return {**evaluate_p2(result), **result}


class Mps:
    """An MPS control daemon with a private pipe dir; always asked to quit."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="shoal-mps-")
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": self.dir + "/pipe", "CUDA_MPS_LOG_DIRECTORY": self.dir + "/log"}

    def __enter__(self) -> Mps:
        os.makedirs(self.env["CUDA_MPS_PIPE_DIRECTORY"]), os.makedirs(self.env["CUDA_MPS_LOG_DIRECTORY"])
        subprocess.run(["nvidia-cuda-mps-control", "-d"], env={**os.environ, **self.env}, check=True, timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env={**os.environ, **self.env},
                       timeout=30)


def step_p3(mps: Mps) -> dict[str, Any]:
    child = spawn(["--worker", "alloc", "--gib", "3", "--then-gib", "2"],
                  {**mps.env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4G"})
    try:
        first, second = read_event(child), read_event(child)
        result = {"first_rc": first["rc"], "second_rc": second["rc"], "survived": child.poll() is None}
    finally:
        release(child)
    return {**evaluate_p3(result), **result}


def spin_pair(seconds: float, envs: list[dict[str, str]]) -> list[int]:
    workers = [spawn(["--worker", "spin", "--gib", "0", "--spin-seconds", str(seconds)], env) for env in envs]
    try:
        for w in workers:
            read_event(w)
        for w in workers:
            w.stdin.write("\n"), w.stdin.flush()  # type: ignore[union-attr, func-returns-value]
        return [int(read_event(w)["launches"]) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker == "alloc":
        worker_alloc(args.gib, args.then_gib)
        return 0
    if args.worker == "spin":
        worker_spin(args.spin_seconds)
        return 0
    if args.pynvml_path:
        sys.path.insert(0, args.pynvml_path)
    sys.path[:0] = [str(ROOT), str(ROOT / "libs" / "common")]
    from services.nodeagent.nvml_backend import NvmlInventory
    from services.nodeagent.procmap import ProcFs

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    procfs = ProcFs()
    try:
        inventory = NvmlInventory(procfs=procfs)
    except Exception as exc:  # no pynvml, no driver: say so in the report
        report = {"results": {"p0": {"pass": False, "error": f"{type(exc).__name__}: {exc}"}},
                  "summary": {"passed": [], "failed": ["p0"], "ok": False}}
        (out / "gpu-check.json").write_text(json.dumps(report, indent=2))
        print(json.dumps(report))
        return 1
    try:
        for step in args.steps:
            started = time.monotonic()
            try:
                if step == "p0":
                    results[step] = step_p0(inventory)
                elif step == "p1":
                    results[step] = step_p1(inventory, procfs)
                elif step == "p2":
                    results[step] = step_p2(inventory)
                elif step == "p4":
                    results[step] = evaluate_ratio(spin_pair(args.spin_seconds, [{}, {}]), 1.0, 0.8, 1.25)
                elif step in ("p3", "p5"):
                    if not shutil.which("nvidia-cuda-mps-control"):
                        results[step] = {"pass": False, "error": "nvidia-cuda-mps-control not found"}
                        continue
                    with Mps() as mps:
                        if step == "p3":
                            results[step] = step_p3(mps)
                        else:
                            envs = [{**mps.env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": p} for p in ("25", "75")]
                            results[step] = evaluate_ratio(spin_pair(args.spin_seconds, envs), 3.0, 2.4, 3.6)
            except Exception as exc:  # one failing step must not hide the others' results
                results[step] = {"pass": False, "error": f"{type(exc).__name__}: {exc}"}
            results[step]["seconds"] = round(time.monotonic() - started, 1)
            print(json.dumps({step: results[step]}), flush=True)
    finally:
        inventory.close()
    report = {"results": results, "summary": summarize(results)}
    (out / "gpu-check.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report["summary"]))
    return 0 if report["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""The schedulers `shoal bench e2e` compares, started fresh for each phase and stopped after it.

- `shoal`: podgrouper, snapshotter, fairshare, planner, binder and the node agent (fake GPUs: it writes the
  reservation pods' GPU ids that fractions wait for), each its own process, with a topic prefix, shard (node
  pool) and fake-node selector of the phase's own;
- `kube-scheduler`: upstream kube-scheduler at its defaults (no --config: its client is limited to 50
  requests/s, bursts of 100);
- `kube-scheduler-qps5000`: the same binary with a KubeSchedulerConfiguration giving its client 5000/5000,
  as unlimited as Shoal's own clients.

    running = start("shoal", state_dir, info, tag="b1a2b3", pool="b1a2b3-p")
    cpu = running.cpu_seconds()          # per process, from /proc/<pid>/stat
    stop(state_dir, running)
"""

from __future__ import annotations

import os
import ssl
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.devstack.paths import k8s_bin
from shoal.devstack.procs import ProcessSpec, alive, free_port, launch, read_pid, stop_processes, wait_ready

SHOAL = "shoal"
KUBE_DEFAULT = "kube-scheduler"
KUBE_EQUAL = "kube-scheduler-qps5000"
SCHEDULERS = (SHOAL, KUBE_DEFAULT, KUBE_EQUAL)
SHOAL_SERVICES = ("podgrouper", "snapshotter", "fairshare", "planner", "binder", "nodeagent")
EQUAL_QPS = 5000
STACK_COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "fakekubelet", "kafka", "redis")
ISOLATED_LABEL = "shoal.io/isolated"  # the session's own Shoal (tests/e2e) leaves these nodes alone


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int, field: str = "VmHWM") -> float:
    """The peak resident set size of a live process in MiB (VmHWM; 0 when it is gone); `field="VmRSS"`: the
    current one."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError):
        pass
    return 0.0


def stack_pids(state_dir: str) -> dict[str, int]:
    """The stack's own servers (apiserver, etcd, …) when their pid files can be read, to report their CPU."""
    if not state_dir:
        return {}
    found = {name: read_pid(Path(state_dir), name) for name in STACK_COMPONENTS}
    return {name: rec[0] for name, rec in found.items() if rec is not None and alive(*rec)}


@dataclass
class Running:
    scheduler: str
    pids: dict[str, int] = field(default_factory=dict)  # process name → pid
    records: dict[str, tuple[int, str, str]] = field(default_factory=dict)  # name → (pid, exe, start ticks)
    launched_at: float = 0.0  # time.monotonic() before the first launch
    ready_at: float = 0.0  # every process ready

    def cpu_seconds(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def peak_rss_mb(self) -> dict[str, float]:
        return {name: peak_rss_mb(pid) for name, pid in self.pids.items()}

    def alive(self) -> list[str]:
        """The processes of this scheduler still running (none, after `stop`)."""
        return [name for name, rec in self.records.items() if alive(*rec)]


def _https_ready(port: int) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    url = f"https://127.0.0.1:{port}/readyz"
    with urllib.request.urlopen(url, timeout=2, context=context) as resp:  # noqa: S310 - loopback
        return resp.status == 200


def kube_scheduler_config(kubeconfig: str, qps: int) -> str:
    """A KubeSchedulerConfiguration giving the client `qps` requests/s and as large a burst."""
    return (
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "leaderElection:\n  leaderElect: false\n"
        f"clientConnection:\n  kubeconfig: {kubeconfig}\n  qps: {qps}\n  burst: {qps}\n"
    )


def kube_scheduler_spec(name: str, kubeconfig: str, config_file: Path | None = None) -> ProcessSpec:
    port = free_port()
    client = [f"--config={config_file}"] if config_file else [f"--kubeconfig={kubeconfig}", "--leader-elect=false"]
    argv = [str(k8s_bin("kube-scheduler")), *client, f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1", f"--secure-port={port}", "-v=1"]
    return ProcessSpec(name=name, argv=argv, ready=lambda: _https_ready(port), ready_timeout_s=90)


def shoal_env(stack_env: dict[str, str], tag: str, pool: str) -> dict[str, str]:
    return {**stack_env, "SHOAL_TOPIC_PREFIX": f"{tag}.", "SHOAL_SHARD_PREFIX": pool,
            "SHOAL_FAKE_NODE_SELECTOR": f"{ISOLATED_LABEL}={tag}", "SHOAL_PUBLISH_TELEMETRY": "false"}


def specs_for(scheduler: str, state_dir: Path, info: Any, tag: str, pool: str) -> list[ProcessSpec]:
    from shoal.devstack.scheduler import service_spec

    if scheduler == SHOAL:
        env = shoal_env(info.env(), tag, pool)
        return [service_spec(name, env, state_dir=state_dir) for name in SHOAL_SERVICES]
    if scheduler == KUBE_DEFAULT:
        return [kube_scheduler_spec(KUBE_DEFAULT, info.kubeconfig)]
    if scheduler == KUBE_EQUAL:
        config = state_dir / f"kube-scheduler-{tag}.yaml"
        config.write_text(kube_scheduler_config(info.kubeconfig, EQUAL_QPS))
        return [kube_scheduler_spec(KUBE_EQUAL, info.kubeconfig, config)]
    raise ValueError(f"unknown scheduler {scheduler!r}; choose from {', '.join(SCHEDULERS)}")


def start(scheduler: str, state_dir: Path, info: Any, *, tag: str, pool: str) -> Running:
    """Launch every process of `scheduler` at once, then wait until each is ready (blocking)."""
    specs = specs_for(scheduler, state_dir, info, tag, pool)
    running = Running(scheduler, launched_at=time.monotonic())
    try:
        for spec in specs:
            running.pids[spec.name] = launch(state_dir, spec)
            running.records[spec.name] = read_pid(state_dir, spec.name) or (running.pids[spec.name], "", "")
        for spec in specs:
            wait_ready(state_dir, spec, running.pids[spec.name])
    except BaseException:
        stop(state_dir, running)
        raise
    running.ready_at = time.monotonic()
    return running


def stop(state_dir: Path, running: Running) -> None:
    stop_processes(state_dir, list(running.pids))


"""Start and stop the real nodes of a stack (kubelet + containerd each, kube-proxy, CoreDNS, kube-scheduler).

    start(state, info, pki, count=1, say=print)   after the core is up (its apiserver on the bridge's IP)
    stop(state)                                   before the core stops; safe on a half-started node

`stop` never needs the apiserver: it stops the kubelets by pid, removes every pod sandbox and container
through each node's own containerd (`ctr`), kills left-over shims by the pids containerd recorded, unmounts
what is mounted under the state dir, removes the node's cgroups and then undoes the host changes (hostnet).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shoal.devstack.errors import DevStackError
from shoal.devstack.pki import Pki
from shoal.devstack.procs import ProcessSpec, free_port, launch, read_pid, stop_processes, wait_ready
from shoal.devstack.realnode import config, hostnet, images

SHARED = ("kube-scheduler", "coredns", "kube-proxy")
CGROUP_FS = Path("/sys/fs/cgroup")


def component_names(state: Path) -> list[str]:
    """Names of the recorded real-node processes, in stop order (kubelets first, containerds last)."""
    recorded = {p.stem for p in (state / "pids").glob("*.pid")}
    kubelets = sorted(n for n in recorded if n.startswith("kubelet-"))
    containerds = sorted(n for n in recorded if n.startswith("containerd-"))
    return kubelets + [n for n in SHARED if n in recorded] + containerds


def is_component(name: str) -> bool:
    return name in SHARED or name.startswith(("kubelet-", "containerd-"))


def node_count(state: Path) -> int:
    return len(list(config.root(state).glob("real-node-*")))


def start(
    state: Path,
    kubeconfig: Path,
    pki: Pki,
    ports: dict[str, int],
    *,
    count: int = 1,
    gpus: int = 8,
    gpu_memory_mib: int = 81920,
    pool: str = "default",
    tie_to_parent: bool = False,
    say: Callable[[str], None] = lambda _m: None,
) -> list[str]:
    """Start `count` real nodes; return their names once each is Ready and advertises `gpus` fake GPUs."""
    began = time.monotonic()
    nodes = [config.NodeDirs(state, i) for i in range(1, count + 1)]
    for key in ("kube-proxy-healthz", "kube-proxy-metrics", "coredns", "coredns-ready", "kube-scheduler"):
        ports[key] = free_port()
    for node in nodes:
        ports[f"kubelet-{node.index}"] = free_port()
        ports[f"kubelet-{node.index}-healthz"] = free_port()
    wanted = [images.pause_image(), images.probe_image()]

    def run(spec: ProcessSpec) -> tuple[ProcessSpec, int]:
        return spec, launch(state, spec, tie_to_parent=tie_to_parent)

    started = [run(config.containerd(node)) for node in nodes]
    for spec, pid in started:
        wait_ready(state, spec, pid)
    for node in nodes:
        for image in wanted:
            images.import_image(node.socket, image)
        _make_cgroup_root(node.cgroup_root)
        hostnet.note_pod_log_dir(state, node.pod_logs)
    say(f"devstack: containerd ready with images imported ({time.monotonic() - began:.1f}s)")
    started = [run(config.kubelet(node, kubeconfig, pki.ca_cert, ports)) for node in nodes]
    started.append(run(config.kube_proxy(state, kubeconfig, nodes[0].name, ports)))
    started.append(run(config.coredns(state, kubeconfig, ports)))
    started.append(run(config.kube_scheduler(state, kubeconfig, ports)))
    for spec, pid in started:
        wait_ready(state, spec, pid)
    names = [n.name for n in nodes]
    asyncio.run(_register(kubeconfig, names, ports["coredns"], gpus, gpu_memory_mib, pool))
    say(f"devstack: real node(s) {', '.join(names)} Ready ({time.monotonic() - began:.1f}s)")
    return names


async def _register(
    kubeconfig: Path, names: list[str], dns_port: int, gpus: int, gpu_memory_mib: int, pool: str
) -> None:
    from kubernetes_asyncio import client
    from kubernetes_asyncio import config as kube_config

    from shoal.devstack.nodes import advertise_gpus

    cfg = client.Configuration()
    await kube_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        core = client.CoreV1Api(api)
        for name in names:
            await _wait_ready(core, name)
            await advertise_gpus(api, name, gpus=gpus, gpu_memory_mib=gpu_memory_mib, pool=pool)
        await _cluster_dns(api, dns_port)


async def _wait_ready(core: Any, name: str, timeout_s: float = 60) -> None:
    from kubernetes_asyncio.client.exceptions import ApiException

    deadline = time.monotonic() + timeout_s
    last = "not registered"
    while time.monotonic() < deadline:
        try:
            node = await core.read_node(name)
            ready = [c for c in node.status.conditions or [] if c.type == "Ready"]
            if ready and ready[0].status == "True":
                return
            last = f"{ready[0].reason}: {ready[0].message}" if ready else "no Ready condition"
        except ApiException as exc:
            if exc.status != 404:
                raise
        await asyncio.sleep(0.3)
    raise DevStackError(f"real node {name} not Ready after {timeout_s:.0f}s: {last}")


async def _cluster_dns(api: Any, dns_port: int) -> None:
    """The kube-dns Service (the kubelet's clusterDNS IP) with CoreDNS on the gateway IP as its endpoint."""
    from kubernetes_asyncio import client

    ports = [("dns", "UDP"), ("dns-tcp", "TCP")]
    await client.CoreV1Api(api).create_namespaced_service(
        "kube-system",
        {
            "metadata": {"name": "kube-dns", "labels": {"k8s-app": "kube-dns"}},
            "spec": {
                "clusterIP": hostnet.CLUSTER_DNS_IP,
                "ports": [{"name": n, "protocol": p, "port": 53, "targetPort": dns_port} for n, p in ports],
            },
        },
    )
    await client.DiscoveryV1Api(api).create_namespaced_endpoint_slice(
        "kube-system",
        {
            "metadata": {
                "name": "kube-dns-host",
                "labels": {
                    "kubernetes.io/service-name": "kube-dns",
                    "endpointslice.kubernetes.io/managed-by": "shoal-devstack",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [hostnet.gateway_ip()], "conditions": {"ready": True}}],
            "ports": [{"name": n, "protocol": p, "port": dns_port} for n, p in ports],
        },
    )


def trust_registry(state: Path | str, host_port: str) -> list[Path]:
    """Let every real node's containerd pull from the plain-HTTP registry at `host_port` (127.0.0.1:PORT).

    containerd 1.6 already falls back to plain HTTP for localhost and 127.0.0.1 registries; the hosts.toml makes
    it explicit (no HTTPS attempt first) and covers any other address on this machine."""
    state = Path(state)
    return [
        config.trust_registry(config.NodeDirs(state, i).certs_d, host_port)
        for i in range(1, node_count(state) + 1)
    ]


# ---- stopping -------------------------------------------------------------------------------------------
def stop(state: Path) -> list[str]:
    """Stop the real nodes and undo their host changes; return what was stopped or removed.

    Every step runs even when an earlier one failed; DevStackError names the failures at the end."""
    names = component_names(state)
    done: list[str] = []
    failed: list[str] = []
    nodes = [config.NodeDirs(state, i) for i in range(1, node_count(state) + 1)]
    kubelets = [n for n in names if n.startswith("kubelet-")]
    shims = {pid for node in nodes for pid in _shim_pids(node)}

    def step(what: str, fn: Callable[[], list[str] | None]) -> None:
        try:
            done.extend(fn() or [])
        except (OSError, subprocess.SubprocessError, DevStackError) as exc:
            failed.append(f"{what}: {exc}")

    step("stop kubelets", lambda: stop_processes(state, kubelets, timeout_s=5.0))
    for node in nodes:
        step(f"containers of {node.name}", lambda node=node: _remove_containers(node))
    rest = [n for n in names if n not in kubelets]
    step("stop processes", lambda: stop_processes(state, rest, timeout_s=5.0))
    if "kube-proxy" in names:
        step("kube-proxy --cleanup", _kube_proxy_cleanup)
    for node in nodes:
        left = {p for p in shims if _is_shim(p)} | set(_shim_pids(node)) | set(_cgroup_pids(node.cgroup_root))
        step(f"processes of {node.name}", lambda left=left: _kill_left(left))
        step(f"cgroups of {node.name}", lambda node=node: _remove_cgroup_root(node.cgroup_root))
    step("mounts", lambda: unmount_under(config.root(state)))
    step("host network", lambda: hostnet.teardown(state))
    if failed:
        raise DevStackError("real node clean-up incomplete: " + "; ".join(failed))
    return names + done


def _kube_proxy_cleanup() -> list[str]:
    subprocess.run(config.kube_proxy_cleanup(), capture_output=True, timeout=60)
    return []


def _remove_containers(node: config.NodeDirs) -> list[str]:
    """Kill and delete every task and container (pod sandboxes too) through the node's containerd, and
    remove the network namespaces containerd pinned for the sandboxes (that removes their veths)."""
    found = read_pid(node.state, f"containerd-{node.index}")
    if found is None or not node.socket.exists():
        return []
    removed = []
    containers = images.ctr(node.socket, "containers", "list", "--quiet", check=False).split()
    netns = [p for c in containers if (p := _sandbox_netns(node.socket, c))]
    for cid in containers:
        images.ctr(node.socket, "tasks", "delete", "--force", cid, check=False, timeout_s=20)
    for cid in containers:
        images.ctr(node.socket, "containers", "delete", cid, check=False, timeout_s=20)
        removed.append(f"container {cid[:12]}")
    for path in netns:
        subprocess.run(["umount", path], capture_output=True)
        try:
            Path(path).unlink(missing_ok=True)
        except OSError:
            pass  # hidden under a later bind mount of the netns dir: hostnet.teardown unmounts that first
        removed.append(f"netns {path}")
    return removed


def _sandbox_netns(socket: Path, cid: str) -> str:
    """The pinned network namespace of a pod sandbox (/var/run/netns/cni-...), else ""."""
    try:
        spec = json.loads(images.ctr(socket, "containers", "info", cid, check=False) or "{}").get("Spec") or {}
    except ValueError:
        return ""
    for ns in (spec.get("linux") or {}).get("namespaces") or []:
        path = ns.get("path", "")
        if ns.get("type") == "network" and path.startswith(("/var/run/netns/", "/run/netns/")):
            return path
    return ""


def _shim_pids(node: config.NodeDirs) -> list[int]:
    """The node's containerd-shim processes: the pids containerd recorded, and any shim serving its socket."""
    pids = []
    for pid_file in node.containerd_state.glob("io.containerd.runtime.v2.task/*/*/shim.pid"):
        try:
            pids.append(int(pid_file.read_text().strip()))
        except (OSError, ValueError):
            continue
    address = f"-address\0{node.socket}\0".encode()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and address in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return [p for p in pids if _is_shim(p)]


def _is_shim(pid: int) -> bool:
    try:
        return b"containerd-shim" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _cgroup_pids(name: str) -> list[int]:
    """Processes in the node's cgroups (the pods' processes, should a shim have died before them)."""
    pids = set()
    for hierarchy in _controllers():
        for procs in (hierarchy / name.lstrip("/")).rglob("cgroup.procs"):
            try:
                pids |= {int(p) for p in procs.read_text().split()}
            except (OSError, ValueError):
                continue
    return sorted(pids)


def _kill_left(pids: set[int]) -> list[str]:
    killed = []
    for pid in sorted(pids):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            continue
        killed.append(f"process {pid}")
        _wait_gone(pid)
    return killed


def _wait_gone(pid: int, timeout_s: float = 3.0) -> None:
    """Until `pid` is dead (gone, or a zombie nobody here can reap)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z":
                return
        except OSError:
            return
        time.sleep(0.05)


def unmount_under(directory: Path) -> list[str]:
    """Unmount every mount point below `directory`, deepest first (lazily when busy)."""
    prefix = str(directory.resolve()) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    for point in sorted(set(points), key=lambda p: p.count("/"), reverse=True):
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)
    return [f"mount {p}" for p in points]


def _controllers() -> list[Path]:
    return [p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink()] if CGROUP_FS.is_dir() else []


def _make_cgroup_root(name: str) -> None:
    """The kubelet's cgroupRoot must exist in every hierarchy (cpuset needs its cpus and mems filled in)."""
    for hierarchy in _controllers():
        path = hierarchy / name.lstrip("/")
        path.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / knob).exists() and not (path / knob).read_text().strip():
                (path / knob).write_text((hierarchy / knob).read_text())


def _remove_cgroup_root(name: str) -> None:
    for hierarchy in _controllers():
        top = hierarchy / name.lstrip("/")
        for _ in range(20):
            if not top.exists():
                break
            for dirpath, _dirs, _files in os.walk(top, topdown=False):
                try:
                    os.rmdir(dirpath)
                except OSError:
                    pass
            if top.exists():
                time.sleep(0.1)

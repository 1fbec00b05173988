"""Build or fetch the stack's binaries into the cache once; later calls only look at the cache."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from shoal.devstack import gotoolchain, paths, systools
from shoal.devstack.errors import DevStackError

K8S_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet", "kube-proxy")

# tool -> the fix a person should run when it is missing
RUNTIME_TOOLS = {
    "redis-server": "apt-get install -y --no-install-recommends redis-server",
    "openssl": "apt-get install -y --no-install-recommends openssl",
    "java": "apt-get install -y --no-install-recommends default-jre-headless",
}
# what a real node (`shoal dev up --real-node`) runs besides the cached binaries
REAL_NODE_TOOLS = {
    "containerd": "apt-get install -y --no-install-recommends containerd runc",
    "ctr": "apt-get install -y --no-install-recommends containerd",
    "runc": "apt-get install -y --no-install-recommends runc",
    "iptables": "apt-get install -y --no-install-recommends iptables",
    "ip": "apt-get install -y --no-install-recommends iproute2",
    "gcc": "apt-get install -y --no-install-recommends gcc libc6-dev",
}
BUILD_TOOLS = {
    "go": "install Go >= 1.24 (https://go.dev/dl) and put it on PATH",
    "mvn": "apt-get install -y --no-install-recommends maven",
    "mmdebstrap": "apt-get install -y --no-install-recommends mmdebstrap",
    "podman": "apt-get install -y --no-install-recommends podman runc",
    "uv": "install uv (https://docs.astral.sh/uv/) and put it on PATH",
}
# script in sh/ -> the tools it needs on PATH
SCRIPT_TOOLS = {
    "build-etcd.sh": ("go",),
    "build-k8s.sh": ("go",),
    "build-coredns.sh": ("go",),
    "fetch-kafka.sh": ("mvn", "java"),
    "build-base-images.sh": ("mmdebstrap", "podman", "uv"),
    "build-standin-images.sh": ("mmdebstrap", "podman"),
}


def _say_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _kafka_ready() -> bool:
    return (paths.kafka_libs().parent / ".done").is_file() and paths.kafka_libs().is_dir()


def missing_parts(real_node: bool = False) -> list[str]:
    """Names of the build scripts whose output is not in the cache yet (CoreDNS only for a real node)."""
    missing = []
    if not paths.etcd_bin().is_file():
        missing.append("build-etcd.sh")
    if not all(paths.k8s_bin(b).is_file() for b in K8S_BINARIES):
        missing.append("build-k8s.sh")
    if not _kafka_ready():
        missing.append("fetch-kafka.sh")
    if real_node and not paths.coredns_bin().is_file():
        missing.append("build-coredns.sh")
    return missing


def check_runtime_tools(real_node: bool = False, say: Callable[[str], None] | None = None) -> None:
    """The tools the stack runs, installed from Debian when missing and allowed (`systools.require`)."""
    tools = {**RUNTIME_TOOLS, **(REAL_NODE_TOOLS if real_node else {})}
    systools.require(tools, say or _say_stderr, why="the local stack")


def run_script(script: str, say: Callable[[str], None], env: Mapping[str, str] | None = None) -> None:
    """Run sh/<script> with `env` added, its output in the cache's logs/ and shown as progress lines;
    DevStackError with the last line when it fails."""
    if "go" in SCRIPT_TOOLS[script]:
        gotoolchain.ensure_go(say)  # Go's own toolchain module from the Go proxy when none is on PATH
    systools.require({tool: BUILD_TOOLS.get(tool) or RUNTIME_TOOLS[tool] for tool in SCRIPT_TOOLS[script]}, say,
                     why=script)
    log = paths.cache_dir() / "logs" / f"{script.removesuffix('.sh')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    say(f"devstack: running {script} (cold cache; output in {log})")
    started = time.monotonic()
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            ["bash", str(paths.SCRIPTS_DIR / script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        assert proc.stdout is not None
        for raw in proc.stdout:
            out.write(raw)
            out.flush()
            line = raw.decode(errors="replace").rstrip()
            if not line.startswith("go: downloading"):
                say(f"  {line}")
        code = proc.wait()
    took = time.monotonic() - started
    if code != 0:
        tail = _last_line(log)
        raise DevStackError(f"{script} failed (exit {code}) after {took:.0f}s: {tail} (full log: {log})")
    say(f"devstack: {script} done in {took:.0f}s")


def _last_line(log: Path) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no output"


def ensure_binaries(say: Callable[[str], None] | None = None, *, real_node: bool = False) -> None:
    """Run the build/fetch scripts for whatever is missing from the cache (resumable; a no-op when warm).

    Several processes may call this at once: a lock in the cache dir makes the second wait for the first.
    With `real_node` CoreDNS and the real node's images are built too, and its host tools checked.
    """
    say = say or _say_stderr
    check_runtime_tools(real_node, say)
    if not missing_parts(real_node):
        _node_images(real_node)
        return
    with cache_lock(".ensure.lock", say):
        for script in missing_parts(real_node):
            run_script(script, say)
    if missing_parts(real_node):
        raise DevStackError(f"cache still incomplete after building: {', '.join(missing_parts(real_node))}")
    _node_images(real_node)


def _node_images(real_node: bool) -> None:
    """The pause and probe images (static C programs, cached; milliseconds when warm)."""
    if real_node:
        from shoal.devstack.realnode import images

        images.pause_image()
        images.probe_image()


@contextlib.contextmanager
def cache_lock(name: str, say: Callable[[str], None]) -> Iterator[None]:
    """Hold `<cache>/<name>` exclusively: a second process building the same part waits for the first."""
    cache = paths.cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / name, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("devstack: another process is building the cache; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield

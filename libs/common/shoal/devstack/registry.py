"""A local image registry (Debian's docker-registry, the CNCF distribution server) on 127.0.0.1, plain HTTP,
its storage in the cache dir so a later run finds the layers it already holds.

    address = start_registry(state_dir)     # "127.0.0.1:<port>", pid in <state>/pids/registry.pid
    stop_registry(state_dir)
    address = stack_registry(state_dir)     # the stack's own (an extra process: `down` stops it)

containerd reads it through a hosts.toml naming `http://<address>`; podman pushes with --tls-verify=false.
"""

from __future__ import annotations

import re
import shutil
import urllib.request
from pathlib import Path

from shoal.devstack import paths
from shoal.devstack.errors import DevStackError
from shoal.devstack.procs import ProcessSpec, alive, free_port, read_pid, start_process, stop_process

NAME = "registry"
INSTALL = "apt-get install -y --no-install-recommends docker-registry"


def registry_storage() -> Path:
    return paths.cache_dir() / "registry"


def registry_spec(state_dir: Path, port: int) -> ProcessSpec:
    """The registry serving `registry_storage()` on 127.0.0.1:`port`; its config file under `state_dir`."""
    binary = shutil.which("docker-registry")
    if binary is None:
        raise DevStackError(f"docker-registry not found on PATH: run `{INSTALL}`")
    conf = Path(state_dir) / NAME / "config.yml"
    conf.parent.mkdir(parents=True, exist_ok=True)
    registry_storage().mkdir(parents=True, exist_ok=True)
    conf.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
        "storage:\n"
        f"  filesystem:\n    rootdirectory: {registry_storage()}\n"
        "  delete:\n    enabled: true\n"
        "  redirect:\n    disable: true\n"
        "http:\n"
        f"  addr: 127.0.0.1:{port}\n"
        # a fixed secret silences the start-up warning; uploads never cross instances here
        "  secret: shoal-local-registry\n"
    )
    return ProcessSpec(
        name=NAME,
        argv=[binary, "serve", str(conf)],
        ready=lambda: _v2_ok(port),
        ready_timeout_s=30,
    )


def _v2_ok(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as resp:  # noqa: S310 - loopback
        return resp.status == 200


def start_registry(state_dir: Path, *, tie_to_parent: bool = False) -> str:
    """Start the registry on a free port and wait until it answers; its address `127.0.0.1:<port>`."""
    try:
        return _start_on(Path(state_dir), free_port(), tie_to_parent)
    except DevStackError as exc:
        if "in use" not in str(exc):
            raise
        # the port picked free was taken before the registry bound it: another one, once
        return _start_on(Path(state_dir), free_port(), tie_to_parent)


def _start_on(state_dir: Path, port: int, tie_to_parent: bool) -> str:
    try:
        start_process(state_dir, registry_spec(state_dir, port), tie_to_parent=tie_to_parent)
    except BaseException:
        stop_process(state_dir, NAME)
        raise
    return f"127.0.0.1:{port}"


def stack_registry(state_dir: Path, *, tie_to_parent: bool = False) -> str:
    """The registry of the stack in `state_dir` as one of its extra processes (`down` stops it): the one
    already running there, else a new one on a free port. Its address `127.0.0.1:<port>`."""
    from shoal.devstack.stack import start_extra

    state = Path(state_dir)
    running = read_pid(state, NAME)
    conf = state / NAME / "config.yml"
    if running and alive(*running) and conf.is_file():
        if addr := re.search(r"^  addr: (127\.0\.0\.1:\d+)$", conf.read_text(), re.MULTILINE):
            return addr.group(1)
    port = free_port()
    try:
        start_extra(state, registry_spec(state, port), tie_to_parent=tie_to_parent)
    except DevStackError as exc:
        stop_process(state, NAME)
        if "in use" not in str(exc):
            raise
        port = free_port()  # taken before the registry bound it: another, once
        start_extra(state, registry_spec(state, port), tie_to_parent=tie_to_parent)
    return f"127.0.0.1:{port}"


def stop_registry(state_dir: Path) -> None:
    stop_process(Path(state_dir), NAME)

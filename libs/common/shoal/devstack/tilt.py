"""The repository's Tiltfile, unchanged, against a local stack with a real node (`shoal dev up --real-node`), set
up the way Tilt expects a dev cluster: Tilt builds each service's image through a Docker API, pushes it to a
registry the node pulls from, applies the dev overlay and waits for every resource.

- Docker API: `podman system service` on the stack's engine storage (containers.py), a unix socket in the
  state dir, builds on the host's network (as images.py builds: podman's bridge network would switch on
  forwarding for the whole host), the registry marked plain HTTP; DOCKER_BUILDKIT=0 (podman has no BuildKit).
- Registry: the stack's local one (registry.py), trusted by the node's containerd; SHOAL_TILT_REGISTRY makes
  the Tiltfile call `default_registry()` with it.
- The overlay: a kustomization generated in the state dir on top of deploy/k8s/overlays/dev
  (SHOAL_TILT_OVERLAY) that swaps the third-party images for the stand-ins (standin_images.py) and keeps the node agent's
  DaemonSet on nodes with a kubelet (the stack's fake GPU nodes have none).

    env = prepare(state_dir, say)   # registry, stand-ins pushed, Docker API, overlay: Tilt's env
    run_tilt(env, ["ci", "--timeout", "15m"], log)
    run_tilt(env, ["down", "--delete-namespaces"], log)
    release(state_dir)              # the Docker API and the registry; `shoal dev down` also stops them
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from shoal.devstack import incluster, paths, realnode
from shoal.devstack.binaries import cache_lock
from shoal.devstack.containers import check_engine_tools, engine_env, run_engine
from shoal.devstack.errors import DevStackError
from shoal.devstack.images import LOCK, push_images
from shoal.devstack.procs import ProcessSpec, free_port, stop_process
from shoal.devstack.registry import stack_registry, stop_registry
from shoal.devstack.scheduler import REPO
from shoal.devstack.stack import StackInfo, start_extra
from shoal.devstack.standin_images import ensure_standins, standin_overrides

BUILD_SCRIPT = REPO / "deploy" / "tools" / "build-tilt.sh"
DOCKER_API = "docker-api"


def tilt_binary() -> Path:
    """The Tilt that deploy/tools/build-tilt.sh builds (with a placeholder web page, so `tilt ci` starts)."""
    proc = subprocess.run(["bash", str(BUILD_SCRIPT), "--path"], capture_output=True, text=True, check=True)
    binary = Path(proc.stdout.strip().splitlines()[-1])
    if not os.access(binary, os.X_OK):
        script = BUILD_SCRIPT.relative_to(REPO)
        raise DevStackError(f"tilt not found at {binary}: build it with `bash {script}`")
    return binary


def _tilt_dir(state_dir: Path) -> Path:
    path = Path(state_dir) / "tilt"
    path.mkdir(parents=True, exist_ok=True)
    return path


def docker_api_spec(state_dir: Path, registry: str) -> ProcessSpec:
    """`podman system service` on the stack's storage at `<state>/tilt/docker.sock`: builds in the host's
    network namespace, `registry` over plain HTTP. Its config files: copies of the engine's with that added."""
    base = _tilt_dir(state_dir)
    env = engine_env()
    conf = Path(env["CONTAINERS_CONF"]).read_text()
    if "[containers]\n" not in conf:
        raise DevStackError(f"{env['CONTAINERS_CONF']} has no [containers] table")
    (base / "containers.conf").write_text(conf.replace("[containers]\n", '[containers]\nnetns = "host"\n', 1))
    registries = Path(env["CONTAINERS_REGISTRIES_CONF"]).read_text()
    (base / "registries.conf").write_text(
        f'{registries}\n[[registry]]\nlocation = "{registry}"\ninsecure = true\n'
    )
    sock = base / "docker.sock"
    sock.unlink(missing_ok=True)
    return ProcessSpec(
        name=DOCKER_API,
        argv=["podman", "system", "service", "--time=0", f"unix://{sock}"],
        env={
            **env,
            "CONTAINERS_CONF": str(base / "containers.conf"),
            "CONTAINERS_REGISTRIES_CONF": str(base / "registries.conf"),
        },
        ready=lambda: _ping(sock),
        ready_timeout_s=30,
    )


def _ping(sock: Path) -> bool:
    """The Docker API's `GET /_ping` answers OK."""
    if not sock.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(2)
        conn.connect(str(sock))
        conn.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
        return conn.recv(4096).split(b"\r\n", 1)[0].endswith(b" 200 OK")


def prepare(
    state_dir: Path, say: Callable[[str], None] | None = None, *, tie_to_parent: bool = False
) -> dict[str, str]:
    """Everything `tilt ci`/`tilt up` needs against the stack in `state_dir` (a real-node stack): the env to
    run Tilt with. The registry and the Docker API join the stack's processes (stopped by `down`; with
    `tie_to_parent`, also when the calling process dies, as the test stack's are)."""
    say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
    state = Path(state_dir)
    info = StackInfo.load(state)
    if not info.real_nodes:
        raise DevStackError(f"the stack in {state} has no real node: start one with `shoal dev up --real-node`")
    check_engine_tools(("podman",))
    began = time.monotonic()
    registry = stack_registry(state, tie_to_parent=tie_to_parent)
    realnode.trust_registry(state, registry)
    standins = push_images(ensure_standins(say), registry, say)
    if DOCKER_API not in info.pids or not _ping(_tilt_dir(state) / "docker.sock"):
        start_extra(state, docker_api_spec(state, registry), tie_to_parent=tie_to_parent)
    # reservation pods on the node's own pause image, as in the in-cluster install
    overlay = incluster.write_overlay(
        _tilt_dir(state) / "overlay",
        standin_overrides(standins),
        {"SHOAL_RESERVATION_IMAGE": realnode.PAUSE_IMAGE},
    )
    took = time.monotonic() - began
    say(f"devstack: Tilt's registry {registry}, Docker API and overlay ready in {took:.1f}s")
    return {
        "KUBECONFIG": info.kubeconfig,
        "DOCKER_HOST": f"unix://{_tilt_dir(state) / 'docker.sock'}",
        "DOCKER_BUILDKIT": "0",
        "SHOAL_TILT_CONTEXT": _current_context(Path(info.kubeconfig)),
        "SHOAL_TILT_REGISTRY": registry,
        "SHOAL_TILT_OVERLAY": str(overlay),
        "TILT_DEV_DIR": str(_tilt_dir(state) / "dev"),  # Tilt's settings and token, not ~/.tilt-dev
        "TILT_DISABLE_ANALYTICS": "1",
        "TILT_HOST": "127.0.0.1",
        "TILT_PORT": os.environ.get("TILT_PORT") or str(free_port()),
        # `kustomize()` in the Tiltfile runs `kubectl kustomize`
        "PATH": f"{paths.k8s_bin('kubectl').parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def _current_context(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["current-context"])


def build_containers() -> set[str]:
    """Ids of the build (buildah working) containers in the stack's storage."""
    check_engine_tools(("buildah",))
    proc = run_engine(["buildah", "containers", "--json"], "list build containers")
    return {row["id"] for row in json.loads(proc.stdout or "[]") or ()}


def remove_build_containers(before: set[str], say: Callable[[str], None] | None = None) -> None:
    """Tilt asks the Docker API to keep each build step's container (`rm=false`), and podman keeps them
    mounted: remove those added since `before` (taken before Tilt started), under the images lock, which a
    `shoal dev images` build holds while its own are in use. Older ones, anybody's, stay."""
    say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
    with cache_lock(LOCK, say):
        if added := build_containers() - before:
            run_engine(["buildah", "rm", *sorted(added)], "remove the build containers Tilt left", timeout_s=600)


def release(state_dir: Path) -> None:
    """Stop the Docker API and the registry `prepare` started (`shoal dev down` would stop them too)."""
    stop_process(Path(state_dir), DOCKER_API)
    stop_registry(Path(state_dir))


def run_tilt(
    env: dict[str, str], args: Sequence[str], log: Path, *, timeout_s: float = 1200
) -> subprocess.CompletedProcess[str]:
    """`tilt <args>` on the repository's Tiltfile with `env` (from `prepare`) added; its output in `log`.
    The exit status is the caller's to judge; a run past `timeout_s` is killed and reported as exit 124.
    After `ci` or `up` the build containers Tilt left are removed."""
    log.parent.mkdir(parents=True, exist_ok=True)
    builds = bool(args) and args[0] in ("ci", "up")
    before = build_containers() if builds else set()
    try:
        code = _run_logged([str(tilt_binary()), *args], env, log, timeout_s)
    finally:
        if builds:
            remove_build_containers(before)
    return subprocess.CompletedProcess(args, code, log.read_text(errors="replace"), "")


def _run_logged(argv: list[str], env: dict[str, str], log: Path, timeout_s: float) -> int:
    with open(log, "w") as out:
        proc = subprocess.Popen(
            argv, cwd=REPO, env={**os.environ, **env}, stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # Tilt and what it runs (kubectl, local resources)
            proc.wait()
            return 124
    return code

"""The stack's own container engine setup for podman and buildah: configuration files and storage in the cache
dir, handed to each command through CONTAINERS_* variables, so nothing under /etc is changed.

    env = engine_env()                       # writes <cache>/containers/*.conf, returns the variables
    run_engine(["podman", "images"], "list images")

Settings (from docs/TESTSTACK facts for these machines): runc, as crun fails on a hybrid cgroup layout; the
cgroupfs manager (no systemd); default ulimits a process without CAP_SYS_RESOURCE can set; short names such as
`python:3.11-slim` resolve to docker.io, as with Docker.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from shoal.devstack import paths
from shoal.devstack.errors import DevStackError

# tool -> the command that installs it (Debian)
ENGINE_TOOLS = {
    "podman": "apt-get install -y --no-install-recommends podman runc",
    "buildah": "apt-get install -y --no-install-recommends buildah",
    "runc": "apt-get install -y --no-install-recommends runc",
}


def engine_dir() -> Path:
    return paths.cache_dir() / "containers"


def run_dir() -> Path:
    """Podman's run root and temp dir: short (podman refuses a run root over 50 characters), one per storage,
    and under /tmp so that a reboot clears them as podman expects."""
    tag = hashlib.sha256(str(engine_dir()).encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / f"shoal-podman-{os.getuid()}-{tag}"


def _configs(root: Path) -> dict[str, str]:
    run = run_dir()
    return {
        "containers.conf": (
            "[containers]\n"
            'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
            "[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'tmp_dir = "{run / "tmp"}"\n'
            "[network]\n"
            f'network_config_dir = "{root / "networks"}"\n'
        ),
        "storage.conf": (
            f'[storage]\ndriver = "overlay"\ngraphroot = "{root / "storage"}"\nrunroot = "{run / "run"}"\n'
        ),
        "registries.conf": 'unqualified-search-registries = ["docker.io"]\nshort-name-mode = "permissive"\n',
    }


def engine_env() -> dict[str, str]:
    """CONTAINERS_CONF, CONTAINERS_STORAGE_CONF and CONTAINERS_REGISTRIES_CONF for the stack's storage
    (`<cache>/containers`); the files are (re)written when their content differs."""
    root = engine_dir()
    root.mkdir(parents=True, exist_ok=True)
    for name, text in _configs(root).items():
        path = root / name
        if not path.is_file() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)
    return {
        "CONTAINERS_CONF": str(root / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(root / "storage.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(root / "registries.conf"),
    }


def check_engine_tools(tools: Sequence[str] = ("podman", "buildah", "runc")) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            raise DevStackError(f"{tool} not found on PATH: run `{ENGINE_TOOLS[tool]}`")


def run_engine(
    argv: Sequence[str], what: str, *, timeout_s: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run podman/buildah on the stack's storage; a failure is DevStackError naming `what` and the last
    line the tool printed."""
    env = {**os.environ, **engine_env()}
    try:
        proc = subprocess.run(
            list(argv), env=env, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise DevStackError(f"{what}: `{' '.join(argv[:3])} …` did not finish in {timeout_s:.0f}s") from None
    except OSError as exc:
        raise DevStackError(f"{what}: cannot run {argv[0]}: {exc.strerror}") from None
    if check and proc.returncode != 0:
        raise DevStackError(
            f"{what} failed (exit {proc.returncode}): {last_line(proc.stderr or proc.stdout)}"
        )
    return proc


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][-300:] if lines else "no output"

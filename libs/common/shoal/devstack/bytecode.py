"""Compiled bytecode for the processes the stack launches.

With `PYTHONDONTWRITEBYTECODE=1` in the environment (set on these machines) and an environment synced without
bytecode, every service process compiles what it imports from source at each launch: kubernetes_asyncio
alone is several CPU seconds, paid by each of the six services at start-up and again after every restart.
This compiles Shoal's own packages and the environment's dependencies once, before the first launch of a
command (`.ci/run` syncs with `uv sync --compile-bytecode`, which compiles the dependencies in parallel).
Files already compiled are only checked (a header read each).
"""

from __future__ import annotations

import functools
import subprocess
import sys
import sysconfig
from pathlib import Path

from shoal.devstack.paths import REPO


def source_dirs() -> list[Path]:
    """Shoal's packages and the interpreter's site-packages (the services' dependencies)."""
    dirs = [REPO / "libs" / "common" / "shoal", REPO / "services"]
    purelib = Path(sysconfig.get_paths()["purelib"])
    return [*dirs, purelib] if purelib.is_dir() else dirs


@functools.cache
def ensure_bytecode() -> bool:
    """Compile what is not compiled yet (once per process, in a child process: callers may be threads of an
    event loop); True when every file compiled. Up to date, the check costs about 0.3 s CPU."""
    dirs = [str(path) for path in source_dirs() if path.is_dir()]
    if not dirs:
        return True
    done = subprocess.run([sys.executable, "-m", "compileall", "-qq", *dirs],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return done.returncode == 0

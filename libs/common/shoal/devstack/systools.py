"""Host tools the stack runs or builds with, installed from Debian when missing (as `.ci/run` does), so the
README's first command works on a fresh Debian machine.

    require({"redis-server": "apt-get install -y --no-install-recommends redis-server"}, say, why="the stack")

A missing tool whose fix is an `apt-get install` is installed when this process may do so (root, `apt-get`
on PATH, `SHOAL_APT` not `0`): one `apt-get update` and one `apt-get install` for all of them, announced
first. Otherwise, or for a tool apt cannot give (Go, uv), MissingTools (a DevStackError; the commands exit 2)
names each missing tool and the exact command that installs it, in one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping

from shoal.devstack.errors import DevStackError, MissingTools

APT_PREFIX = "apt-get install -y --no-install-recommends "


def apt_packages(fix: str) -> list[str]:
    """The packages an `apt-get install` fix names ([] for any other fix)."""
    return fix.removeprefix(APT_PREFIX).split() if fix.startswith(APT_PREFIX) else []


def may_install() -> bool:
    return os.environ.get("SHOAL_APT", "1") != "0" and os.geteuid() == 0 and shutil.which("apt-get") is not None


def missing(tools: Mapping[str, str]) -> dict[str, str]:
    return {tool: fix for tool, fix in tools.items() if shutil.which(tool) is None}


def require(tools: Mapping[str, str], say: Callable[[str], None], *, why: str = "the stack",
            runner: Callable[[list[str]], subprocess.CompletedProcess] | None = None) -> None:
    """Every tool of `tools` ({tool: fix}) on PATH, installing the apt ones first when allowed."""
    absent = missing(tools)
    packages = sorted({p for fix in absent.values() for p in apt_packages(fix)})
    if packages and may_install():
        run = runner or (lambda argv: subprocess.run(argv, capture_output=True, text=True, check=False,
                                                     env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}))
        say(f"devstack: installing {' '.join(packages)} with apt-get for {why} (SHOAL_APT=0 to refuse)")
        for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                                                     *packages]):
            done = run(argv)
            if done.returncode != 0:
                last = (done.stderr or done.stdout or "").strip().splitlines()[-1:] or ["no output"]
                raise DevStackError(f"{' '.join(argv[:2])} failed (exit {done.returncode}): {last[0]}")
        absent = missing(tools)
    if absent:
        raise MissingTools(refusal(absent))


def refusal(absent: Mapping[str, str]) -> str:
    """One line naming every missing tool and the exact command that installs it (apt ones in one command)."""
    packages = sorted({p for fix in absent.values() for p in apt_packages(fix)})
    parts = []
    if packages:
        tools = ", ".join(tool for tool, fix in absent.items() if apt_packages(fix))
        why = ("SHOAL_APT=0" if os.environ.get("SHOAL_APT", "1") == "0" else
               "not root" if os.geteuid() != 0 else "no apt-get on PATH")
        parts.append(f"{tools} not found on PATH ({why}): run `apt-get update && {APT_PREFIX}{' '.join(packages)}`"
                     " as root")
    parts += [f"{tool} not found on PATH: {fix}" for tool, fix in absent.items() if not apt_packages(fix)]
    return "; ".join(parts)

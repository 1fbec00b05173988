"""The README's first command on a machine that lacks the host tools and may not install them: one line naming
the exact install command, exit status 2 (`shoal demo`, `shoal dev up`; PATH without redis-server, java, …)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("argv", [["demo"], ["dev", "up"]])
def test_missing_tools_are_one_line_with_the_install_command_and_exit_2(tmp_path: Path, argv: list[str]) -> None:
    bare = tmp_path / "bin"  # a PATH with nothing on it but this Python
    bare.mkdir()
    (bare / "python3").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items()
           if k not in ("SHOAL_KUBECONFIG", "SHOAL_KAFKA_BOOTSTRAP", "SHOAL_REDIS_URL", "SHOAL_DEV_STATE_DIR")}
    env.update(PATH=str(bare), SHOAL_APT="0", SHOAL_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "shoal.cli.main", *argv, "--state-dir", str(tmp_path / "state")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert ("redis-server, openssl, java not found on PATH (SHOAL_APT=0): run `apt-get update && apt-get install -y "
            "--no-install-recommends default-jre-headless openssl redis-server` as root") in lines[0]
    assert proc.stdout == ""


def test_ci_run_refuses_in_one_line_with_the_install_command_and_exit_2(tmp_path: Path) -> None:
    bare = tmp_path / "bin"  # the shell tools .ci/run needs before its package check, nothing else
    bare.mkdir()
    for tool in ("bash", "env", "id", "dirname", "cat", "printf", "mktemp"):
        (bare / tool).symlink_to(subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True,
                                                text=True, check=True).stdout.strip())
    repo = Path(__file__).resolve().parents[3]
    proc = subprocess.run(["bash", str(repo / ".ci" / "run")], env={"PATH": str(bare), "SHOAL_APT": "0",
                                                                    "HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(".ci/run: missing "), proc.stderr
    assert "openssl" in lines[0] and "(SHOAL_APT=0): run `apt-get update && apt-get install -y " \
        "--no-install-recommends " in lines[0] and lines[0].endswith("as root, then .ci/run again")

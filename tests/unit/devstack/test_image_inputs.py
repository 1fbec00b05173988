"""The pure parts of `shoal dev images`: which base images the Dockerfile asks for, how names are qualified,
what counts as a build input, and which image ids a buildah log names (no podman needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.devstack import images
from shoal.devstack.buildcache import ids_in_log
from shoal.devstack.errors import DevStackError


def test_the_repository_dockerfile_asks_for_bookworm_python_3_11_and_uv() -> None:
    bases = images.base_images()
    assert bases.python.startswith("docker.io/library/python:3.11.") and bases.python.endswith(
        "-slim-bookworm"
    )
    assert (bases.suite, bases.python_minor) == ("bookworm", "3.11")
    assert bases.uv == f"ghcr.io/astral-sh/uv:{bases.uv_version}"


@pytest.mark.parametrize(
    ("name", "qualified"),
    [
        ("python:3.11.14-slim-bookworm", "docker.io/library/python:3.11.14-slim-bookworm"),
        ("bitnami/redis:7", "docker.io/bitnami/redis:7"),
        ("ghcr.io/astral-sh/uv:0.13.9", "ghcr.io/astral-sh/uv:0.13.9"),
        ("localhost/shoal-api:dev", "localhost/shoal-api:dev"),
        ("127.0.0.1:5000/shoal-api:dev", "127.0.0.1:5000/shoal-api:dev"),
    ],
)
def test_names_are_qualified_as_docker_does(name: str, qualified: str) -> None:
    assert images.qualify(name) == qualified


def test_a_dockerfile_with_other_bases_is_refused_in_one_line(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM ghcr.io/astral-sh/uv:0.13.9 AS uv\nFROM alpine:3.20 AS build\nFROM build\n")
    with pytest.raises(DevStackError, match=r"found alpine:3\.20, ghcr\.io/astral-sh/uv:0\.13\.9$"):
        images.base_images(dockerfile)


def test_stage_names_are_not_base_images(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM ghcr.io/astral-sh/uv:1.2.3 AS uv\nFROM python:3.12.1-slim-trixie AS build\n"
        "FROM python:3.12.1-slim-trixie AS base\nFROM base AS runtime\n"
    )
    bases = images.base_images(dockerfile)
    assert (bases.python, bases.suite, bases.python_minor, bases.uv_version) == (
        "docker.io/library/python:3.12.1-slim-trixie",
        "trixie",
        "3.12",
        "1.2.3",
    )


def test_build_inputs_follow_the_context_and_ignore_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path
    (repo / "docker").mkdir()
    (repo / "docker" / "Dockerfile").write_text("FROM x\n")
    (repo / "docker" / "Dockerfile.dockerignore").write_text(
        "*\n!libs/\n!pyproject.toml\n**/__pycache__\n**/*.pyc\n"
    )
    (repo / "libs" / "pkg" / "__pycache__").mkdir(parents=True)
    (repo / "pyproject.toml").write_text("[project]\n")
    source = repo / "libs" / "pkg" / "mod.py"
    source.write_text("A = 1\n")
    monkeypatch.setattr(images, "REPO", repo)
    monkeypatch.setattr(images, "DOCKERFILE", repo / "docker" / "Dockerfile")
    monkeypatch.setattr(images, "IGNOREFILE", repo / "docker" / "Dockerfile.dockerignore")
    first = images.context_digest()
    (repo / "libs" / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    (repo / "libs" / "pkg" / "old.pyc").write_bytes(b"\0")
    (repo / "README.md").write_text("not in the context\n")
    assert images.context_digest() == first
    source.write_text("A = 2\n")
    assert images.context_digest() not in (None, first)
    source.chmod(0o755)
    changed = images.context_digest()
    source.chmod(0o644)
    assert changed != images.context_digest()


def test_an_ignore_file_this_cannot_read_means_always_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ignore = tmp_path / "Dockerfile.dockerignore"
    ignore.write_text("tests/\n")
    monkeypatch.setattr(images, "IGNOREFILE", ignore)
    assert images.context_digest() is None


def test_ids_in_a_buildah_log() -> None:
    log = (
        "[2/5] STEP 4/10: COPY --from=uv /uv /usr/local/bin/uv\n"
        "--> Using cache 9aec915c96ca0772eba19c3c1627fa1a2342a1071620b4135ef1cf6071ab6a02\n"
        "--> 9aec915c96c\n"
        "[5/5] COMMIT shoal-planner:dev\n"
        "--> da848431109\n"
        "Successfully tagged localhost/shoal-planner:dev\n"
    )
    assert ids_in_log(log) == {
        "9aec915c96ca0772eba19c3c1627fa1a2342a1071620b4135ef1cf6071ab6a02",
        "9aec915c96c",
        "da848431109",
    }

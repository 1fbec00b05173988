"""The stack's launcher compiles what its services import, also under PYTHONDONTWRITEBYTECODE=1."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from shoal.devstack import bytecode


def test_compiles_sources_that_have_no_bytecode_even_when_the_interpreter_writes_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text("VALUE = 1\n")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(bytecode, "source_dirs", lambda: [package])
    assert bytecode.ensure_bytecode.__wrapped__() is True
    assert list((package / "__pycache__").glob("mod.*.pyc"))


def test_a_source_that_does_not_compile_is_reported_and_the_rest_still_compiled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "broken.py").write_text("def (:\n")
    (package / "fine.py").write_text("VALUE = 2\n")
    monkeypatch.setattr(bytecode, "source_dirs", lambda: [package])
    assert bytecode.ensure_bytecode.__wrapped__() is False
    assert list((package / "__pycache__").glob("fine.*.pyc"))


def test_covers_shoal_the_services_and_their_dependencies() -> None:
    dirs = bytecode.source_dirs()
    assert bytecode.REPO / "services" in dirs
    assert bytecode.REPO / "libs" / "common" / "shoal" in dirs
    assert any((d / "kubernetes_asyncio").is_dir() for d in dirs)

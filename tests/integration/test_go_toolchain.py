"""A machine without Go gets Go's own toolchain module from the Go proxy, checked against the checksum database,
cached (shoal.devstack.gotoolchain); a tampered zip is refused."""

from __future__ import annotations

import io
import subprocess
import zipfile
from pathlib import Path

import pytest

from shoal.devstack import gotoolchain
from shoal.devstack.errors import DevStackError


def test_without_go_on_path_the_toolchain_is_fetched_checked_and_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no go here (it lives in /usr/local/go or the cache)
    assert gotoolchain.shutil.which("go") is None
    said: list[str] = []
    go = gotoolchain.ensure_go(said.append)
    assert go.is_file() and str(go.parent) == gotoolchain.os.environ["PATH"].split(":")[0]
    version = subprocess.run([str(go), "version"], capture_output=True, text=True, check=True).stdout
    assert f"go{gotoolchain.GO_VERSION} linux/" in version
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    again: list[str] = []
    assert gotoolchain.ensure_go(again.append, fetch=lambda url: pytest.fail(f"fetched {url} again")) == go
    assert again == []


def test_a_zip_that_does_not_match_the_checksum_database_is_refused(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("SHOAL_CACHE", str(tmp_path))
    version = gotoolchain.module_version()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"golang.org/toolchain@{version}/bin/go", b"#!/bin/sh\necho tampered\n")

    def fetch(url: str) -> bytes:
        if "/sumdb/" in url:
            return f"1\ngolang.org/toolchain {version} h1:ZOmGe1OnfREDMIdb1Qi4G9JSuDPBLGExZMQ4nis1RXM=\n".encode()
        return buffer.getvalue()

    with pytest.raises(DevStackError, match="checksum mismatch"):
        gotoolchain.ensure_go(lambda _: None, fetch=fetch)
    assert not (tmp_path / "go-toolchain").exists() or not any((tmp_path / "go-toolchain").rglob("go"))

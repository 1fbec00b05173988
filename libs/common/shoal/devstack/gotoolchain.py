"""A Go toolchain for the cold build when none is on PATH (a fresh machine; Debian's golang-go is too old).

Go's own toolchains are Go modules (`golang.org/toolchain@v0.0.1-go<version>.<os>-<arch>`, what `GOTOOLCHAIN`
downloads), served by the Go module proxy: the zip is fetched once into the cache, checked against the checksum
database (read through the same proxy, as the go command does) and its `bin` put first on PATH.

    go = ensure_go(say)   # Path of the go binary: the one on PATH, else the cached toolchain
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import platform
import shutil
import stat
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

from shoal.devstack import paths
from shoal.devstack.errors import DevStackError

GO_VERSION = "1.26.8"
MODULE = "golang.org/toolchain"
ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def _proxy() -> str:
    first = (os.environ.get("GOPROXY") or "https://proxy.golang.org").split(",")[0].split("|")[0].strip()
    return "https://proxy.golang.org" if first in ("", "direct", "off") else first.rstrip("/")


def module_version(version: str = GO_VERSION) -> str:
    arch = ARCHES.get(platform.machine().lower())
    if arch is None or platform.system() != "Linux":
        raise DevStackError(f"go not found on PATH: install Go >= 1.24 (https://go.dev/dl) for "
                            f"{platform.system()}/{platform.machine()} and put it on PATH")
    return f"v0.0.1-go{version}.linux-{arch}"


def dirhash(archive: zipfile.ZipFile) -> str:
    """The module zip's `h1:` hash (golang.org/x/mod/sumdb/dirhash.Hash1), as go.sum lines carry it."""
    summary = hashlib.sha256()
    for name in sorted(archive.namelist()):
        summary.update(f"{hashlib.sha256(archive.read(name)).hexdigest()}  {name}\n".encode())
    return "h1:" + base64.b64encode(summary.digest()).decode()


def expected_hash(version: str, fetch: Callable[[str], bytes]) -> str | None:
    """The toolchain's h1 hash from the checksum database ($GOSUMDB, through the proxy); None when GOSUMDB=off."""
    sumdb = (os.environ.get("GOSUMDB") or "sum.golang.org").split()[0]
    if sumdb == "off":
        return None
    record = fetch(f"{_proxy()}/sumdb/{sumdb}/lookup/{MODULE}@{version}").decode(errors="replace")
    for line in record.splitlines():
        parts = line.split()
        if parts[:2] == [MODULE, version] and len(parts) == 3:
            return parts[2]
    raise DevStackError(f"the checksum database has no hash for {MODULE}@{version}")


def _fetch(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=300) as response:  # noqa: S310 - the Go module proxy
            return response.read()
    except OSError as exc:
        raise DevStackError(f"cannot fetch {url}: {exc}; install Go >= 1.24 (https://go.dev/dl) instead") from None


def ensure_go(say: Callable[[str], None], *, fetch: Callable[[str], bytes] = _fetch) -> Path:
    """`go` on PATH, else the cached toolchain (fetched and checked once), whose bin is put first on PATH."""
    found = shutil.which("go")
    if found:
        return Path(found)
    version = module_version()
    root = paths.cache_dir() / "go-toolchain" / f"go{GO_VERSION}"
    go = root / "bin" / "go"
    if not go.is_file():
        url = f"{_proxy()}/{MODULE}/@v/{version}.zip"
        say(f"devstack: go not found on PATH: fetching Go {GO_VERSION} ({MODULE}@{version}, ~70 MB) from the Go "
            f"module proxy into {root}")
        data = fetch(url)
        archive = zipfile.ZipFile(io.BytesIO(data))
        want = expected_hash(version, fetch)
        if want is not None and dirhash(archive) != want:
            raise DevStackError(f"{url}: checksum mismatch (got {dirhash(archive)}, the checksum database says {want})")
        staging = root.with_name(root.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        prefix = f"{MODULE}@{version}/"
        for info in archive.infolist():
            if not info.filename.startswith(prefix) or info.is_dir():
                continue
            target = staging / info.filename[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(info))
            mode = (info.external_attr >> 16) & 0o777
            if mode & stat.S_IXUSR:
                target.chmod(mode)
        shutil.rmtree(root, ignore_errors=True)
        staging.rename(root)
    os.environ["PATH"] = f"{go.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return go

"""Shoal's service images built from docker/Dockerfile as it is (what users build with Docker), with buildah
on the stack's own storage, and pushed to a registry.

    bases = ensure_base_images(say)                    # the Dockerfile's FROM images, made once (no registry)
    images = build_images(SERVICES, target="runtime")  # localhost/shoal-<service>:dev, one Image each
    images = push_images(images, "127.0.0.1:5000")     # Image.remote, Image.digest filled in

A service's image is rebuilt only when its build inputs changed (the Dockerfile, the files its ignore file
lets into the context, the base images): their digest is a label on the image. A rebuild reuses buildah's
layer cache, so a change to Shoal's sources does not resolve the dependencies again.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from shoal.devstack import buildcache, paths
from shoal.devstack.binaries import cache_lock, run_script
from shoal.devstack.containers import check_engine_tools, engine_dir, engine_env, last_line, run_engine
from shoal.devstack.errors import DevStackError
from shoal.devstack.procs import last_log_line
from shoal.devstack.scheduler import REPO, SERVICES

DOCKERFILE = REPO / "docker" / "Dockerfile"
IGNOREFILE = REPO / "docker" / "Dockerfile.dockerignore"
TARGETS = ("runtime", "dev")
DEFAULT_TAGS = {"runtime": "dev", "dev": "tilt"}  # `dev` is Tilt's stage (live-updated sources)
INPUTS_LABEL = "io.shoal.build-inputs"
LOCK = ".images.lock"
Stored = dict[str, Any]  # one image as `podman image inspect` describes it
_MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
)


@dataclass(frozen=True)
class BaseImages:
    """The Dockerfile's two external FROM images, fully qualified, and what making them takes."""

    python: str  # docker.io/library/python:3.11.14-slim-bookworm
    uv: str  # ghcr.io/astral-sh/uv:0.13.9
    suite: str  # bookworm
    python_minor: str  # 3.11
    uv_version: str  # 0.13.9


@dataclass(frozen=True)
class Image:
    """One service image in the stack's storage; `remote` and `digest` once pushed."""

    service: str
    name: str  # localhost/shoal-<service>:<tag>
    image_id: str  # sha256 of its config, without the prefix
    size_bytes: int
    built: bool  # False: the stored image was current
    seconds: float = 0.0
    remote: str = ""  # <registry>/shoal-<service>:<tag>
    digest: str = ""  # sha256:… of the pushed manifest

    @property
    def pinned(self) -> str:
        """`<registry>/shoal-<service>@sha256:…`: the exact pushed image (empty before a push)."""
        return f"{self.remote.rsplit(':', 1)[0]}@{self.digest}" if self.digest else ""


def _say_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def qualify(name: str) -> str:
    """An image name as Docker resolves it: `python:3` -> `docker.io/library/python:3`."""
    first, _, rest = name.partition("/")
    if not rest:
        return f"docker.io/library/{name}"
    if "." in first or ":" in first or first == "localhost":
        return name
    return f"docker.io/{name}"


def base_images(dockerfile: Path = DOCKERFILE) -> BaseImages:
    """Read the external FROM images of `dockerfile`: one `python:<x.y.z>-slim-<suite>` and one
    `ghcr.io/astral-sh/uv:<version>` (what `ensure_base_images` knows how to make)."""
    stages: set[str] = set()
    external: list[str] = []
    for line in dockerfile.read_text().splitlines():
        if m := re.match(r"\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE):
            if m.group(1) not in stages:
                external.append(m.group(1))
            if m.group(2):
                stages.add(m.group(2))
    python = [
        n for n in external if re.fullmatch(r"(docker\.io/(library/)?)?python:\d+\.\d+\.\d+-slim-\w+", n)
    ]
    uv = [n for n in external if re.fullmatch(r"ghcr\.io/astral-sh/uv:\d+\.\d+\.\d+", n)]
    others = sorted(set(external) - set(python) - set(uv))
    if len(set(python)) != 1 or len(set(uv)) != 1 or others:
        raise DevStackError(
            f"{dockerfile}: expected FROM python:<x.y.z>-slim-<debian suite> and ghcr.io/astral-sh/uv:<version>, "
            f"found {', '.join(sorted(set(external))) or 'no FROM'}"
        )
    tag = python[0].rsplit(":", 1)[1]
    version, suite = tag.split("-slim-")
    return BaseImages(
        python=qualify(python[0]),
        uv=uv[0],
        suite=suite,
        python_minor=".".join(version.split(".")[:2]),
        uv_version=uv[0].rsplit(":", 1)[1],
    )


def ensure_base_images(say: Callable[[str], None] | None = None) -> BaseImages:
    """Make the Dockerfile's base images in the stack's storage if they are not there yet (cold: ~1 min)."""
    say = say or _say_stderr
    check_engine_tools()
    bases = base_images()
    with cache_lock(LOCK, say):
        _ensure_bases_locked(bases, say)
    return bases


def _ensure_bases_locked(
    bases: BaseImages, say: Callable[[str], None], also: Iterable[str] = ()
) -> dict[str, Stored]:
    """The stored base images and `also` (see `stored_images`), after making the base images if one was missing."""
    names = [bases.python, bases.uv, *also]
    stored = stored_images(names)
    if bases.python in stored and bases.uv in stored:
        return stored
    env = {
        **engine_env(),
        "SUITE": bases.suite,
        "PYTHON_IMAGE": bases.python,
        "PYTHON_MINOR": bases.python_minor,
        "UV_IMAGE": bases.uv,
        "UV_VERSION": bases.uv_version,
        "WORK": str(engine_dir() / "work"),
    }
    run_script("build-base-images.sh", say, env)
    return stored_images(names)


def build_images(
    services: Iterable[str] = SERVICES,
    *,
    target: str = "runtime",
    tag: str = "",
    say: Callable[[str], None] | None = None,
) -> list[Image]:
    """Build `shoal-<service>:<tag>` (default tag: DEFAULT_TAGS[target]) from docker/Dockerfile's `target`
    stage, one service after the other (the base images first, if missing). A service whose image is current
    is not built again."""
    say = say or _say_stderr
    services = list(services)
    unknown = sorted(set(services) - set(SERVICES))
    if unknown or target not in TARGETS:
        what = f"unknown service(s) {', '.join(unknown)}" if unknown else f"unknown target {target!r}"
        raise DevStackError(f"{what}: services are {', '.join(SERVICES)}; targets {', '.join(TARGETS)}")
    tag = tag or DEFAULT_TAGS[target]
    check_engine_tools()
    bases = base_images()
    with cache_lock(LOCK, say):
        names = {service: f"localhost/shoal-{service}:{tag}" for service in services}
        stored = _ensure_bases_locked(bases, say, names.values())
        context = context_digest()
        took: dict[str, float | None] = {}
        try:
            for service, name in names.items():
                inputs = _inputs_digest(
                    context, service, target, [stored[b]["Id"] for b in (bases.python, bases.uv)]
                )
                labels = (stored.get(name) or {}).get("Labels") or {}
                current = inputs is not None and labels.get(INPUTS_LABEL) == inputs
                took[service] = None if current else _build_one(service, target, name, inputs, say)
        finally:
            # buildah keeps a working container of each `FROM … AS` stage it copied from
            run_engine(["buildah", "rm", "--all"], "remove buildah's working containers")
        if any(t is not None for t in took.values()):
            buildcache.prune(say)
            stored = stored_images(names.values())
    return [_image(service, names[service], stored, took[service]) for service in services]


def _inputs_digest(context: str | None, service: str, target: str, base_ids: list[str]) -> str | None:
    if context is None:
        return None
    return hashlib.sha256("\0".join([context, service, target, *base_ids]).encode()).hexdigest()


def _build_one(service: str, target: str, name: str, inputs: str | None, say: Callable[[str], None]) -> float:
    """Build one image; the seconds it took."""
    log = paths.cache_dir() / "logs" / "images" / f"{service}-{target}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    say(f"devstack: building {name} (target {target}; log {log})")
    began = time.monotonic()
    argv = [
        "buildah", "bud", "--pull=never", "--network=host", "--layers", "--force-rm",
        "--ignorefile", str(IGNOREFILE), "--target", target, "--build-arg", f"SERVICE={service}",
        "--label", f"{INPUTS_LABEL}={inputs or 'unknown'}", "-f", str(DOCKERFILE), "-t", name, str(REPO),
    ]  # fmt: skip
    proc = run_engine(argv, f"building {name}", timeout_s=1800, check=False)
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise DevStackError(
            f"building {name} failed (exit {proc.returncode}) after {time.monotonic() - began:.0f}s: "
            f"{last_log_line(log)} (full log: {log})"
        )
    took = time.monotonic() - began
    say(f"devstack: built {name} in {took:.1f}s")
    buildcache.record(service, target, buildcache.ids_in_log(proc.stdout + proc.stderr))
    return took


def stored_images(names: Iterable[str]) -> dict[str, Stored]:
    """`podman image inspect` of each of `names` that is in the stack's storage, by name."""
    names = list(names)
    proc = run_engine(
        ["podman", "image", "inspect", "--format", "json", *names], "inspect images", check=False
    )
    try:
        rows = json.loads(proc.stdout or "[]")
    except ValueError:
        raise DevStackError(f"podman image inspect failed: {last_line(proc.stderr)}") from None
    if proc.returncode != 0 and "image not known" not in proc.stderr:
        raise DevStackError(f"podman image inspect failed (exit {proc.returncode}): {last_line(proc.stderr)}")
    return {name: row for row in rows for name in row.get("RepoTags") or () if name in names}


def _image(service: str, name: str, stored: dict[str, Stored], took: float | None) -> Image:
    row = stored.get(name)
    if row is None:
        raise DevStackError(f"{name} is not in the stack's image storage after building it")
    return Image(
        service=service,
        name=name,
        image_id=row["Id"],
        size_bytes=int(row.get("Size") or 0),
        built=took is not None,
        seconds=took or 0.0,
    )


def context_digest() -> str | None:
    """sha256 over the Dockerfile, its ignore file and every file that ignore file lets into the
    build context (names, executable bits, contents). None when the ignore file is not of the form this
    reads (`*` first, then `!path` includes and `**/name` excludes): then the image is always rebuilt."""
    rules = [
        ln.strip() for ln in IGNOREFILE.read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    if not rules or rules[0] != "*":
        return None
    includes = [r[1:].rstrip("/") for r in rules[1:] if r.startswith("!")]
    excludes = [r.removeprefix("**/") for r in rules[1:] if not r.startswith("!")]
    if any("/" in r for r in excludes) or any(".." in i for i in includes):
        return None
    digest = hashlib.sha256()
    for root in (DOCKERFILE, IGNOREFILE, *(REPO / i for i in includes)):
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
            if any(fnmatch.fnmatchcase(part, pat) for part in rel.parts for pat in excludes):
                continue
            digest.update(f"\0{rel}\0{path.stat().st_mode & 0o111}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def push_images(
    images: Iterable[Image], registry: str, say: Callable[[str], None] | None = None
) -> list[Image]:
    """Push each image to `registry` (host:port) as `<registry>/shoal-<service>:<tag>`, over plain HTTP for a
    loopback registry. An image the registry already holds under that name is not sent again."""
    say = say or _say_stderr
    loopback = registry.split(":")[0] in ("127.0.0.1", "localhost")
    pushed = []
    with cache_lock(LOCK, say):
        for image in images:
            remote = f"{registry}/{image.name.split('/', 1)[1]}"
            digest = _registry_digest(registry, remote, image.image_id) if loopback else ""
            if not digest:
                began = time.monotonic()
                digest_file = engine_dir() / "digests" / f"{image.service}.digest"
                digest_file.parent.mkdir(parents=True, exist_ok=True)
                run_engine(
                    ["podman", "push", "--quiet", f"--tls-verify={'false' if loopback else 'true'}",
                     "--digestfile", str(digest_file), image.name, remote],
                    f"pushing {image.name} to {registry}",
                    timeout_s=900,
                )  # fmt: skip
                digest = digest_file.read_text().strip()
                say(f"devstack: pushed {remote} in {time.monotonic() - began:.1f}s")
            pushed.append(replace(image, remote=remote, digest=digest))
    return pushed


def _registry_digest(registry: str, remote: str, image_id: str) -> str:
    """The manifest digest under which `registry` serves `remote`, if that manifest is of `image_id`."""
    repo, tag = remote.removeprefix(f"{registry}/").rsplit(":", 1)
    request = urllib.request.Request(
        f"http://{registry}/v2/{repo}/manifests/{tag}", headers={"Accept": _MANIFEST_TYPES}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310 - loopback registry
            manifest = json.loads(resp.read())
            digest = resp.headers.get("Docker-Content-Digest", "")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return ""
        raise DevStackError(f"registry {registry} answered {exc.code} for {remote}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise DevStackError(f"registry {registry} not reachable: {exc}") from None
    return digest if (manifest.get("config") or {}).get("digest") == f"sha256:{image_id}" else ""

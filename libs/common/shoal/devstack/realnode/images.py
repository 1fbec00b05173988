"""Images the real node needs without any registry: static C programs in scratch images, cached.

    pause_image()   registry-free sandbox image, pause.c from the Kubernetes module (`gcc -static`)
    probe_image()   the test workload (probe.c next to this file: `serve PORT`, `dial HOST:PORT...`)
    import_image(containerd_socket, tar)   `ctr -n k8s.io images import`

An image is a `docker save` style archive (manifest.json + config + one layer), which `ctr images import`
reads; it is rebuilt only when its source changes.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from shoal.devstack import paths
from shoal.devstack.errors import DevStackError

PAUSE_IMAGE = "shoal.local/pause:3.10"
PROBE_IMAGE = "shoal.local/probe:1"
PROBE_SOURCE = Path(__file__).resolve().parent / "probe.c"


@dataclass(frozen=True)
class Image:
    name: str
    tar: Path


def _images_dir() -> Path:
    return paths.cache_dir() / "images"


def pause_source() -> Path:
    return paths.cache_dir() / "go" / "mod" / "k8s.io" / f"kubernetes@{paths.K8S_VERSION}" / "build" / "pause" / "linux" / "pause.c"


def pause_image() -> Image:
    src = pause_source()
    if not src.is_file():
        raise DevStackError(f"{src} missing: run `shoal dev build` (the Kubernetes module brings pause.c)")
    return static_c_image(PAUSE_IMAGE, src, "/pause", ["-DVERSION=3.10-shoal"])


def probe_image() -> Image:
    return static_c_image(PROBE_IMAGE, PROBE_SOURCE, "/probe")


def static_c_image(name: str, source: Path, binary: str, cflags: list[str] | None = None) -> Image:
    """Compile `source` statically and pack it as `binary` (the entrypoint) in a scratch image."""
    flags = ["-Os", "-static", "-s", *(cflags or [])]
    key = hashlib.sha256(source.read_bytes() + " ".join([name, binary, *flags]).encode()).hexdigest()[:16]
    out = _images_dir() / f"{name.rsplit('/', 1)[-1].replace(':', '-')}-{key}.tar"
    if out.is_file():
        return Image(name, out)
    if shutil.which("gcc") is None:
        raise DevStackError("gcc not found: `apt-get install -y gcc libc6-dev` (static images for the real node)")
    out.parent.mkdir(parents=True, exist_ok=True)
    exe = out.with_suffix(".bin")
    done = subprocess.run(["gcc", *flags, "-o", str(exe), str(source)], capture_output=True, text=True)
    if done.returncode != 0:
        raise DevStackError(f"gcc {source.name} failed: {done.stderr.strip()[-300:]}")
    tmp = out.with_suffix(".tmp")
    write_archive(tmp, name, {binary.lstrip("/"): exe.read_bytes()}, [binary])
    tmp.replace(out)
    exe.unlink()
    return Image(name, out)


def write_archive(path: Path, name: str, files: dict[str, bytes], entrypoint: list[str]) -> None:
    """A one-layer image archive in `docker save` layout holding `files` (mode 0755)."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in sorted(files.items()):
            info = tarfile.TarInfo(member)
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            tar.addfile(info, io.BytesIO(data))
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": entrypoint, "Env": ["PATH=/"]},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        }
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [name], "Layers": ["layer.tar"]}]).encode()
    with tarfile.open(path, "w") as tar:
        for member, data in (("layer.tar", layer_bytes), (config_name, config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(member)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))


def ctr(socket: Path, *args: str, check: bool = True, timeout_s: float = 60) -> str:
    """`ctr` against the node's own containerd, in the CRI namespace."""
    try:
        done = subprocess.run(
            ["ctr", "--address", str(socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except FileNotFoundError:
        raise DevStackError("ctr not found: `apt-get install -y containerd`") from None
    if check and done.returncode != 0:
        raise DevStackError(f"ctr {' '.join(args[:3])} failed: {done.stderr.strip()[-300:]}")
    return done.stdout


def import_image(socket: Path, image: Image) -> None:
    ctr(socket, "images", "import", str(image.tar))

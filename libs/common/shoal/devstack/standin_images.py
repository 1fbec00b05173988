"""Stand-ins for the third-party images of deploy/k8s/overlays/dev (Redis, Apache Kafka, kube-webhook-certgen),
which no registry serves on these machines: Debian rootfs images made by sh/build-standin-images.sh with our
own entrypoints (standins/), in the stack's container storage. Same flags, env conventions and Secret keys as
the upstream images, so the overlay runs unchanged with `images:` pointing at them.

    images = ensure_standins(say)                  # Image per stand-in, built once per change of its inputs
    images = push_images(images, "127.0.0.1:5000")  # (images.py) then `standin_overrides(images)` for kustomize

An image's tag is the digest of what makes it (the script, standins/, the Kafka jars' names, the suite), so a
change to any of them builds a new one; an image already in storage is kept.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from shoal.devstack import paths
from shoal.devstack.binaries import cache_lock, ensure_binaries, run_script
from shoal.devstack.containers import check_engine_tools, engine_dir, engine_env
from shoal.devstack.images import LOCK, Image, base_images, stored_images

STANDINS_DIR = Path(__file__).resolve().parent / "standins"
SCRIPT = "build-standin-images.sh"
# stand-in -> the image name deploy/k8s/overlays/dev uses (what a kustomize `images:` entry matches)
UPSTREAM = {
    "redis": "redis",
    "kafka": "apache/kafka",
    "certgen": "registry.k8s.io/ingress-nginx/kube-webhook-certgen",
}


def standin_names(suite: str) -> dict[str, str]:
    """stand-in -> `localhost/shoal-standin-<name>:<inputs digest>`."""
    digest = hashlib.sha256(f"{suite}\0".encode())
    for path in [paths.SCRIPTS_DIR / SCRIPT, *sorted(p for p in STANDINS_DIR.rglob("*") if p.is_file())]:
        digest.update(f"\0{path.name}\0{path.stat().st_mode & 0o111}\0".encode())
        digest.update(path.read_bytes())
    jars = sorted(p.name for p in paths.kafka_libs().glob("*.jar"))
    digest.update("\0".join(jars).encode())
    tag = digest.hexdigest()[:16]
    return {name: f"localhost/shoal-standin-{name}:{tag}" for name in UPSTREAM}


def ensure_standins(say: Callable[[str], None] | None = None) -> list[Image]:
    """The three stand-ins in the stack's storage, built first when missing (cold ≈ 2.5 min; warm < 1 s).
    Debian's suite is the one of the Dockerfile's Python base image."""
    say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
    check_engine_tools(("podman",))
    ensure_binaries(say)  # the cached Kafka jars
    suite = base_images().suite
    names = standin_names(suite)
    with cache_lock(LOCK, say):
        stored = stored_images(names.values())
        built = set(names.values()) - set(stored)
        if built:
            env = {
                **engine_env(),
                "SUITE": suite,
                "WORK": str(engine_dir() / "work-standins"),
                "STANDINS": str(STANDINS_DIR),
                "KAFKA_LIBS": str(paths.kafka_libs()),
                "REDIS_IMAGE": names["redis"],
                "KAFKA_IMAGE": names["kafka"],
                "CERTGEN_IMAGE": names["certgen"],
            }
            run_script(SCRIPT, say, env)
            stored = stored_images(names.values())
    return [
        Image(
            service=f"standin-{name}",
            name=image,
            image_id=stored[image]["Id"],
            size_bytes=int(stored[image].get("Size") or 0),
            built=image in built,
        )
        for name, image in names.items()
    ]


def standin_overrides(pushed: Sequence[Image]) -> list[dict[str, str]]:
    """kustomize `images:` entries that swap the dev overlay's third-party images for the pushed stand-ins."""
    out = []
    for image in pushed:
        name = image.service.removeprefix("standin-")
        remote, tag = image.remote.rsplit(":", 1)
        out.append({"name": UPSTREAM[name], "newName": remote, "newTag": tag})
    return out

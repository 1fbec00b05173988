"""Stand-ins for the third-party images deploy/k8s/overlays/dev runs (redis, apache/kafka, kube-webhook-certgen),
for a local cluster that reaches no image registry: Debian rootfs (mmdebstrap) with our own entrypoints
(`standins/`: the same environment conventions, flags and Secret keys), in the stack's container storage.

    images = standin_images(say)     # Image per stand-in; `OVERLAY_NAMES[image.service]` is what it replaces

Each is made once: the tag is a digest of what goes into it (the entrypoints, the build script, the Kafka jars'
version, the Debian suite), so a change to any makes a new one.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable

from shoal.devstack import paths
from shoal.devstack.binaries import cache_lock, run_script
from shoal.devstack.containers import check_engine_tools, engine_dir, engine_env
from shoal.devstack.images import LOCK, Image, base_images, image_of, stored_images

STANDINS_DIR = paths.SCRIPTS_DIR.parent / "standins"
SCRIPT = "build-standin-images.sh"
# stand-in -> the image name the dev overlay uses
OVERLAY_NAMES = {
    "standin-redis": "redis",
    "standin-kafka": "apache/kafka",
    "standin-certgen": "registry.k8s.io/ingress-nginx/kube-webhook-certgen",
}


def _tag(suite: str) -> str:
    digest = hashlib.sha256(f"{suite}\0{paths.KAFKA_VERSION}\0".encode())
    for path in sorted([paths.SCRIPTS_DIR / SCRIPT, *STANDINS_DIR.iterdir()]):
        if path.is_file():
            digest.update(f"\0{path.name}\0".encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def standin_images(say: Callable[[str], None] | None = None) -> list[Image]:
    """The three stand-ins, built when missing (cold: a few minutes, mostly the JRE; warm: a lookup)."""
    say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
    check_engine_tools(("podman",))
    suite = base_images().suite
    tag = _tag(suite)
    names = {service: f"localhost/shoal-{service.replace('-', '/', 1)}:{tag}" for service in OVERLAY_NAMES}
    with cache_lock(LOCK, say):
        stored = stored_images(names.values())
        if len(stored) < len(names):
            kafka_libs = paths.cache_dir() / f"kafka-{paths.KAFKA_VERSION}" / "libs"
            run_script(SCRIPT, say, {
                **engine_env(), "SUITE": suite, "WORK": str(engine_dir() / "work-standins"),
                "STANDINS": str(STANDINS_DIR), "KAFKA_LIBS": str(kafka_libs),
                "REDIS_IMAGE": names["standin-redis"], "KAFKA_IMAGE": names["standin-kafka"],
                "CERTGEN_IMAGE": names["standin-certgen"]})
            stored = stored_images(names.values())
    return [image_of(service, name, stored, None) for service, name in names.items()]

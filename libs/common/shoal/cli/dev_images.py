"""`shoal dev images`: build every service's image from docker/Dockerfile (unchanged) with buildah, without a
Docker engine or a registry to pull from, and optionally push them; see docs/devstack.md."""

from __future__ import annotations

import argparse
import sys
import time

SERVICES_HELP = "comma-separated services (default: all eight)"


def add_parser(sub: argparse._SubParsersAction) -> None:
    images = sub.add_parser(
        "images",
        help="build the service images from docker/Dockerfile (cached; seconds when nothing changed)",
        description=__doc__,
    )
    images.add_argument("--services", default="", help=SERVICES_HELP)
    images.add_argument(
        "--target", default="runtime", choices=("runtime", "dev"), help="Dockerfile stage (default runtime)"
    )
    images.add_argument(
        "--tag", default="", help="tag of localhost/shoal-<service> (default: dev for runtime, tilt for dev)"
    )
    images.add_argument(
        "--push",
        metavar="REGISTRY",
        default="",
        help="also push to REGISTRY (host:port; plain HTTP for 127.0.0.1/localhost) as REGISTRY/shoal-<service>:TAG",
    )


def run(args: argparse.Namespace) -> int:
    from shoal.devstack.images import DEFAULT_TAGS, build_images, push_images
    from shoal.devstack.scheduler import SERVICES

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    began = time.monotonic()
    services = [s.strip() for s in args.services.split(",") if s.strip()] or list(SERVICES)
    tag = args.tag or DEFAULT_TAGS[args.target]
    images = build_images(services, target=args.target, tag=tag, say=say)
    if args.push:
        images = push_images(images, args.push, say=say)
    for image in images:
        state = f"built in {image.seconds:.0f}s" if image.built else "current"
        where = f"  {image.pinned}" if image.pinned else ""
        print(f"{image.name:<36} {image.image_id[:12]}  {image.size_bytes / 1e6:>5.0f} MB  {state}{where}")
    say(f"devstack: {len(images)} image(s) ready in {time.monotonic() - began:.1f}s")
    return 0

"""Every service's image from docker/Dockerfile, unchanged, built with buildah (`shoal dev images`; cached after
the first run), pushed to a local registry this module starts on 127.0.0.1, pulled back from it over plain
HTTP into an empty storage, and run with podman: each image starts its service's code as uid 10001.

Cold (no base images, no layer cache) this takes minutes; warm, seconds. No Docker engine is involved.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.devstack.containers import engine_env, run_engine
from shoal.devstack.errors import DevStackError
from shoal.devstack.images import Image, build_images, push_images
from shoal.devstack.registry import start_registry, stop_registry
from shoal.devstack.scheduler import SERVICES

pytestmark = pytest.mark.timeout(1800)  # a cold cache makes the base images and eight builds first

SERVICE_USER = "10001:10001"
# what each container prints: its identity, its entrypoint's target and whether the service's code imports
PROBE = """
import importlib, json, os, sys
service = os.environ["SHOAL_SERVICE"]
main = importlib.import_module(f"services.{service}.__main__").main
print(json.dumps({
    "service": service,
    "uid": os.getuid(),
    "gid": os.getgid(),
    "entrypoint": os.path.realpath("/usr/local/bin/shoal-service"),
    "executable": os.access("/usr/local/bin/shoal-service", os.X_OK),
    "main": callable(main),
    "python": "%d.%d" % sys.version_info[:2],
}))
"""


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def built() -> list[Image]:
    try:
        return build_images(SERVICES, say=_say)
    except DevStackError as exc:
        pytest.fail(f"shoal dev images: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    state = tmp_path_factory.mktemp("registry")
    try:
        address = start_registry(state, tie_to_parent=True)
    except DevStackError as exc:
        pytest.fail(f"registry: {exc}", pytrace=False)
    try:
        yield address
    finally:
        stop_registry(state)


@pytest.fixture(scope="module")
def pushed(built: list[Image], registry: str) -> list[Image]:
    return push_images(built, registry, say=_say)


def _get(url: str, accept: str = "") -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {}, method="GET")
    with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310 - loopback registry
        return resp.status, resp.read()


def test_every_image_is_the_service_run_as_its_own_user(built: list[Image]) -> None:
    assert [image.service for image in built] == list(SERVICES)
    for image in built:
        [config] = json.loads(run_engine(["podman", "image", "inspect", image.name], "inspect").stdout)
        assert config["Config"]["User"] == SERVICE_USER, image.name
        assert config["Config"]["Entrypoint"] == ["/usr/local/bin/shoal-service"], image.name
        assert f"SHOAL_SERVICE={image.service}" in config["Config"]["Env"], image.name
        assert "8080/tcp" in (config["Config"].get("ExposedPorts") or {}), image.name
        proc = run_engine(
            ["podman", "run", "--rm", "--network=none", "--entrypoint", "python3", image.name, "-c", PROBE],
            f"run {image.name}",
        )
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        assert seen == {
            "service": image.service,
            "uid": 10001,
            "gid": 10001,
            "entrypoint": f"/opt/shoal/bin/shoal-{image.service}",
            "executable": True,
            "main": True,
            "python": "3.11",
        }


def test_the_registry_serves_every_image_over_plain_http(pushed: list[Image], registry: str) -> None:
    _, body = _get(f"http://{registry}/v2/_catalog")
    assert {f"shoal-{s}" for s in SERVICES} <= set(json.loads(body)["repositories"])
    for image in pushed:
        assert image.remote == f"{registry}/shoal-{image.service}:dev"
        assert image.digest.startswith("sha256:") and image.pinned.endswith(image.digest)
        repo = f"shoal-{image.service}"
        status, body = _get(
            f"http://{registry}/v2/{repo}/manifests/{image.digest}",
            "application/vnd.oci.image.manifest.v1+json",
        )
        manifest = json.loads(body)
        assert manifest["config"]["digest"] == f"sha256:{image.image_id}"  # what ran in the test above
        for blob in [manifest["config"], *manifest["layers"]]:
            head = urllib.request.Request(
                f"http://{registry}/v2/{repo}/blobs/{blob['digest']}", method="HEAD"
            )
            with urllib.request.urlopen(head, timeout=10) as resp:  # noqa: S310 - loopback registry
                assert resp.status == 200 and int(resp.headers["Content-Length"]) == blob["size"]


def test_an_image_pulled_from_the_registry_into_empty_storage_runs(
    pushed: list[Image], registry: str, tmp_path: Path
) -> None:
    """What a node does: pull by digest over plain HTTP into storage that holds nothing, then run it."""
    image = next(i for i in pushed if i.service == "planner")
    run = Path(tempfile.mkdtemp(prefix="shoal-pull-"))  # podman wants a run root of at most 50 characters
    fresh = [
        "podman", "--root", str(tmp_path / "root"), "--runroot", str(run / "run"),
        "--tmpdir", str(run / "tmp"), "--storage-driver=overlay",
    ]  # fmt: skip
    env = {**os.environ, **engine_env()}
    try:
        pull = subprocess.run(
            [*fresh, "pull", "--quiet", "--tls-verify=false", image.pinned],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert pull.returncode == 0, f"podman pull {image.pinned}: {pull.stderr[-2000:]}"
        proc = subprocess.run(
            [*fresh, "run", "--rm", "--network=none", "--entrypoint", "python3", image.pinned, "-c", PROBE],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        assert (seen["service"], seen["uid"], seen["main"]) == ("planner", 10001, True)
    finally:
        subprocess.run([*fresh, "rmi", "--all", "--force"], env=env, capture_output=True)
        shutil.rmtree(run, ignore_errors=True)


def test_a_second_build_and_push_reuse_what_is_there(pushed: list[Image], registry: str) -> None:
    began = time.monotonic()
    again = build_images(SERVICES, say=_say)
    rebuilt = time.monotonic() - began
    assert [(i.name, i.image_id, i.built) for i in again] == [(i.name, i.image_id, False) for i in pushed]
    began = time.monotonic()
    repushed = push_images(again, registry, say=_say)
    assert [i.digest for i in repushed] == [i.digest for i in pushed]
    assert rebuilt < 30 and time.monotonic() - began < 10, f"warm build {rebuilt:.1f}s"

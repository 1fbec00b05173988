"""A service that cannot reach Kafka, Redis or the Kubernetes API, or finds no Kubernetes configuration, prints
one line on stderr (which, where it looked, what to set) and exits 3 within SHOAL_START_TIMEOUT_S: never a
traceback. The dependencies here are closed ports on 127.0.0.1, kubeconfigs that are missing or point at a
closed port, no configuration at all, and a fake apiserver on 127.0.0.1 that starts late or rejects the token.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from shoal.adapters.dependencies import KAFKA, KUBE, REDIS, NotReached, reach
from shoal.adapters.http import serve
from shoal.settings import KafkaSettings, KubeSettings, RedisSettings, ServiceSettings

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 1
BOUND_S = 25  # well under the 30 s default: the setting was used (the rest is the interpreter's imports)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}"}}}}]
users: [{{name: u, user: {{token: t0ken}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return path


def start(service: str, home: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run `python -m services.<service>` with only these variables (no KUBECONFIG, no in-cluster env)."""
    full = {"PATH": "/usr/bin:/bin", "HOME": str(home), "SHOAL_START_TIMEOUT_S": str(START_TIMEOUT_S),
            "SHOAL_HTTP_PORT": "0", **env}
    began = time.monotonic()
    result = subprocess.run([sys.executable, "-m", f"services.{service}"], env=full, cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    return result, time.monotonic() - began


def the_line(result: subprocess.CompletedProcess[str], prog: str) -> str:
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: "), result.stderr
    return lines[0]


def test_each_unreachable_dependency_is_named_with_its_address(tmp_path: Path) -> None:
    kafka, redis, kube = closed_port(), closed_port(), closed_port()
    config = kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{kube}")
    result, took = start("binder", tmp_path, SHOAL_KAFKA_BOOTSTRAP=f"127.0.0.1:{kafka}",
                         SHOAL_REDIS_URL=f"redis://shoal:s3cret@127.0.0.1:{redis}/0", SHOAL_KUBECONFIG=str(config))
    line = the_line(result, "shoal-binder")
    assert f"Kafka at 127.0.0.1:{kafka} not reached within 1 s" in line and "set SHOAL_KAFKA_BOOTSTRAP" in line
    assert f"Redis at redis://127.0.0.1:{redis}/0 not reached within 1 s" in line and "set SHOAL_REDIS_URL" in line
    assert f"Kubernetes API at kubeconfig {config} not reached within 1 s" in line
    assert f"127.0.0.1:{kube}" in line and "set SHOAL_KUBECONFIG" in line
    assert "s3cret" not in line
    assert took < BOUND_S


def test_a_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "kubeconfig"
    result, took = start("podgrouper", tmp_path, SHOAL_KUBECONFIG=str(missing))
    line = the_line(result, "shoal-podgrouper")
    assert f"no Kubernetes API configuration (SHOAL_KUBE_KUBECONFIG (or SHOAL_KUBECONFIG): {missing} does not exist)" in line
    assert "set SHOAL_KUBECONFIG" in line
    assert took < BOUND_S


def test_no_kubernetes_configuration_at_all(tmp_path: Path) -> None:
    result, took = start("nodeagent", tmp_path, SHOAL_NODE_NAME="n1", SHOAL_BACKEND="fake")
    line = the_line(result, "shoal-nodeagent")
    assert "no Kubernetes API configuration" in line and "in-cluster" in line
    assert str(tmp_path / ".kube" / "config") in line and "set SHOAL_KUBECONFIG" in line
    assert took < BOUND_S


def settings_for(config: Path) -> ServiceSettings:
    return ServiceSettings(kube=KubeSettings(kubeconfig=str(config)))


def fake_apiserver(status: int) -> web.Application:
    app = web.Application()

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"major": "1", "minor": "36"} if status == 200 else {"kind": "Status"},
                                 status=status)

    app.router.add_get("/version", version)
    return app


@pytest.fixture
async def late_apiserver() -> AsyncIterator[int]:
    """A fake apiserver on a port that is closed for the first half second."""
    port = closed_port()

    async def later() -> None:
        await asyncio.sleep(0.5)
        async with serve(fake_apiserver(200), "127.0.0.1", port):
            await asyncio.Event().wait()

    task = asyncio.create_task(later())
    yield port
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_start_waits_for_an_apiserver_that_comes_late(late_apiserver: int, tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{late_apiserver}")
    began = time.monotonic()
    await reach(settings_for(config), (KUBE,), timeout_s=20)
    assert 0.4 < time.monotonic() - began < 20


async def test_rejected_credentials_end_the_wait_at_once(tmp_path: Path) -> None:
    async with serve(fake_apiserver(401), "127.0.0.1", 0) as port:
        config = kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
        began = time.monotonic()
        with pytest.raises(NotReached) as info:
            await reach(settings_for(config), (KUBE,), timeout_s=20)
    assert time.monotonic() - began < 10
    assert f"Kubernetes API at kubeconfig {config} cannot be used" in str(info.value) and "401" in str(info.value)


async def test_a_forbidden_version_still_counts_as_reached(tmp_path: Path) -> None:
    async with serve(fake_apiserver(403), "127.0.0.1", 0) as port:
        await reach(settings_for(kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")), (KUBE,),
                    timeout_s=5)


async def test_the_wait_ends_at_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    settings = ServiceSettings(kafka=KafkaSettings(bootstrap=f"127.0.0.1:{closed_port()}"),
                               redis=RedisSettings(url=f"redis://127.0.0.1:{closed_port()}/0"))
    began = time.monotonic()
    with pytest.raises(NotReached) as info:
        await reach(settings, (KAFKA, REDIS), timeout_s=0.5)
    assert 0.4 < time.monotonic() - began < 5
    assert "Kafka at" in str(info.value) and "; and Redis at" in str(info.value)
    assert not [r for r in caplog.records if r.levelno >= 30], "each failed try is quiet; the line says it all"

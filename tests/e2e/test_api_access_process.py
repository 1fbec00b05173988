"""The `shoal-api` process with SHOAL_API_AUTH=kubernetes on the real stack: without the right to create
TokenReviews it stops at start with one clear line (exit 3); `kubectl shoal` and `shoal explain` pass the token of
the user's kubeconfig (each user reads their own namespace, gets 403 on another's; a client-certificate user has
no token: 401); the dashboard asks for a token, keeps it for the tab and sends it on every fetch and the stream."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from access_users import (
    bind_in_namespace,
    bound_cluster_wide,
    kubeconfig_with_admin_cert,
    kubeconfig_with_token,
    token_of,
    viewer_roles,
)
from browser import Browser
from e2e_helpers import api_service

from shoal.adapters.kube import NAMESPACES, PODS
from shoal.devstack.procs import free_port

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def auth_api(shoal: Any, stack: Any) -> Iterator[str]:
    """A `shoal-api` process with authorisation on (the stack's admin kubeconfig may create the reviews)."""
    yield from api_service(shoal, stack, SHOAL_API_AUTH="kubernetes", SHOAL_AUTH_CACHE_TTL_S="2")


def pending_pod(namespace: str, name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulerName": "nobody-schedules-this", "containers": [{"name": "c", "image": "busybox"}]}}


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_") and k != "KUBECONFIG"}
    return subprocess.run(argv, env={**clean, **env}, capture_output=True, text=True, timeout=120, check=False)


async def test_auth_on_without_the_right_to_review_stops_at_start(stack: Any, kube: Any, namespace: str,
                                                                  tmp_path: Path) -> None:
    token = await token_of(kube, namespace, "plain")  # no system:auth-delegator
    config = kubeconfig_with_token(stack.kubeconfig, token, tmp_path / "plain.kubeconfig")
    env = {**stack.env(), "SHOAL_KUBECONFIG": str(config), "KUBECONFIG": str(config), "SHOAL_API_AUTH": "kubernetes",
           "SHOAL_HTTP_PORT": str(free_port()), "SHOAL_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:8]}."}
    done = await asyncio.to_thread(run, [sys.executable, "-m", "services.api"], env)
    assert done.returncode == 3, done.stderr[-3000:]
    said = [ln for ln in done.stderr.splitlines() if ln.strip() and not ln.startswith("{")]  # not the JSON log
    assert len(said) == 1 and said[0].startswith("shoal-api: SHOAL_API_AUTH=kubernetes: "), done.stderr[-3000:]
    assert "may not create tokenreviews.authentication.k8s.io or subjectaccessreviews.authorization.k8s.io" in said[0]
    assert "system:auth-delegator" in said[0] and "Traceback" not in done.stderr + done.stdout

    # credentials the apiserver does not accept at all: the start-up check of the Kubernetes API says so
    bogus = kubeconfig_with_token(stack.kubeconfig, "not-a-token", tmp_path / "bogus.kubeconfig")
    done = await asyncio.to_thread(run, [sys.executable, "-m", "services.api"],
                                   {**env, "SHOAL_KUBECONFIG": str(bogus), "KUBECONFIG": str(bogus)})
    said = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 3 and len(said) == 1 and "Kubernetes API" in said[0] and "401" in said[0], done.stderr


async def test_the_clis_pass_the_kubeconfig_token(auth_api: str, stack: Any, kube: Any, namespace: str,
                                                  tmp_path: Path) -> None:
    other = f"t-{uuid.uuid4().hex[:8]}"
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        async with viewer_roles(kube):
            for ns in (namespace, other):
                await kube.create(PODS, pending_pod(ns, "train-0"), namespace=ns)
            alice = kubeconfig_with_token(stack.kubeconfig, await token_of(kube, namespace, "alice"),
                                          tmp_path / "alice.kubeconfig")
            await bind_in_namespace(kube, namespace, "alice")

            plugin = [str(BIN / "kubectl-shoal"), "--api", auth_api, "--kubeconfig", str(alice)]
            mine = await asyncio.to_thread(run, [*plugin, "explain", "train-0", "-n", namespace, "-o", "json"], {})
            assert mine.returncode == 0 and json.loads(mine.stdout)["subject"] == f"{namespace}/train-0", mine.stderr
            theirs = await asyncio.to_thread(run, [*plugin, "explain", "train-0", "-n", other], {})
            assert theirs.returncode == 1 and "answered 403" in theirs.stderr, theirs.stderr
            assert f"may not get pods in namespace {other}" in theirs.stderr

            shoal_env = {"SHOAL_API_URL": auth_api, "SHOAL_KUBECONFIG": str(alice)}
            cli = await asyncio.to_thread(run, [str(BIN / "shoal"), "explain", f"{namespace}/train-0"], shoal_env)
            assert cli.returncode == 0 and cli.stdout.startswith(f"{namespace}/train-0"), cli.stderr
            queues = await asyncio.to_thread(run, [str(BIN / "shoal"), "queues"], shoal_env)
            assert queues.returncode == 1 and "shoal-cluster-viewer" in queues.stderr, queues.stderr

            # a user that authenticates with a client certificate has no token to pass on
            by_cert = kubeconfig_with_admin_cert(stack, tmp_path / "admin-cert.kubeconfig")
            admin = await asyncio.to_thread(run, [str(BIN / "shoal"), "explain", f"{namespace}/train-0"],
                                            {"SHOAL_API_URL": auth_api, "SHOAL_KUBECONFIG": str(by_cert)})
            assert admin.returncode == 1 and "answered 401" in admin.stderr and "no bearer token" in admin.stderr
    finally:
        await kube.delete(NAMESPACES, other)


async def test_the_dashboard_asks_for_a_token_and_sends_it(auth_api: str, kube: Any, namespace: str,
                                                          tmp_path: Path) -> None:
    async with viewer_roles(kube):
        alice, carol = await token_of(kube, namespace, "alice"), await token_of(kube, namespace, "carol")
        await bind_in_namespace(kube, namespace, "alice")
        async with bound_cluster_wide(kube, namespace, "carol", "shoal-cluster-viewer"), \
                Browser.launch(tmp_path) as page:
            status = "document.getElementById('status').textContent"
            await page.goto(auth_api + "/")
            await page.wait_for(f"{status}.includes('no bearer token')", what="the dashboard to say it needs a token")
            assert await page.eval("document.getElementById('token').classList.contains('wanted')")

            async def use(token: str) -> None:
                """Type the token into the field and submit it (the page stores it and reloads)."""
                await page.eval(f"""setTimeout(() => {{ document.getElementById('token').value = {json.dumps(token)};
                    document.getElementById('token-form').requestSubmit(); }}, 0)""")
                await asyncio.sleep(1.5)
                await page.wait_for(f"!!window.shoal && sessionStorage.getItem('shoal.token') === {json.dumps(token)}",
                                    what="the page reloaded with the token")

            await use(carol)  # a cluster reader: the map, the queues and the live stream
            await page.wait_for("!!window.shoal && !!shoal.state.refreshed_gpus && !!shoal.state.refreshed_workloads",
                                what="the GPU map and the workloads read with the token")
            await page.wait_for("document.getElementById('status').classList.contains('live')",
                                what="the decision stream (fetch with the Authorization header) connected")

            await use(alice)  # her namespace only: the cluster-wide map is refused, by name
            await page.wait_for(f"{status}.includes('may not get clusterviews.shoal.io')",
                                what="the GPU map's 403 naming the permission")

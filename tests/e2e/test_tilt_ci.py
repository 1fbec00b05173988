"""`tilt ci` on the repository's Tiltfile against a stack with a real node, the way a user runs it against kind:
Tilt builds the eight service images (docker/Dockerfile, target `dev`) through podman's Docker API, pushes them
to the stack's registry (SHOAL_TILT_REGISTRY → `default_registry`), applies deploy/k8s/overlays/dev with the
third-party images swapped for the stand-ins (SHOAL_TILT_OVERLAY) and waits for every resource, the unit tests
included: it exits 0. Then every Shoal Deployment and the node agent's DaemonSet are Ready on Tilt's images,
the api answers through its Service, and `tilt down --delete-namespaces` removes it all (shoal.devstack.tilt)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from shoal.devstack import paths, tilt
from shoal.devstack.procs import free_port
from shoal.devstack.scheduler import SERVICES

pytestmark = [pytest.mark.stack, pytest.mark.slow, pytest.mark.timeout(1800)]

NAMESPACES = ("shoal-system", "shoal-node", "kai-resource-reservation")


def kubectl(kubeconfig: str, *args: str) -> Any:
    proc = subprocess.run(
        [str(paths.k8s_bin("kubectl")), "--kubeconfig", kubeconfig, *args, "-o", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(proc.stdout)


def test_tilt_ci_deploys_shoal(real_node_stack: Any) -> None:
    state = Path(real_node_stack.state_dir)
    # SHOAL_API_PORT: the local end of the Tiltfile's port-forward, free here
    # the suite runs the unit tests itself; inside `tilt ci` they would run beside eight image builds
    env = {**tilt.prepare(state, tie_to_parent=True), "SHOAL_API_PORT": str(free_port()), "SHOAL_TILT_UNIT_TESTS": "0"}
    logs = state / "logs"
    try:
        began = time.monotonic()
        ci = tilt.run_tilt(env, ["ci", "--timeout", "20m"], logs / "tilt-ci.log", timeout_s=1500)
        took = time.monotonic() - began
        assert ci.returncode == 0, f"tilt ci exit {ci.returncode} after {took:.0f}s:\n{ci.stdout[-6000:]}"
        print(f"tilt ci: every resource ready in {took:.0f}s")

        kubeconfig = real_node_stack.kubeconfig
        registry = env["SHOAL_TILT_REGISTRY"]
        deployments = kubectl(kubeconfig, "get", "deployments", "-n", "shoal-system")["items"]
        workloads = {d["metadata"]["name"]: d for d in deployments}
        [agent] = kubectl(kubeconfig, "get", "daemonsets", "-n", "shoal-node")["items"]
        workloads[agent["metadata"]["name"]] = agent
        for service in SERVICES:
            obj = workloads[f"shoal-{service}"]
            [container] = obj["spec"]["template"]["spec"]["containers"]
            assert container["image"].startswith(f"{registry}/shoal-{service}:tilt-"), container["image"]
            status = obj["status"]
            if obj["kind"] == "DaemonSet":
                assert status["numberReady"] == status["desiredNumberScheduled"] == 1, status
            else:
                assert status.get("readyReplicas") == obj["spec"]["replicas"], (service, status)
        for infra in ("kafka", "redis"):
            assert workloads[infra]["status"].get("readyReplicas") == 1, workloads[infra]["status"]
        job = kubectl(kubeconfig, "get", "job", "shoal-admission-certgen", "-n", "shoal-system")
        assert job["status"].get("succeeded") == 1, job["status"]

        # the api's Service, from the host through kube-proxy's rules
        svc = kubectl(kubeconfig, "get", "service", "shoal-api", "-n", "shoal-system")
        port = svc["spec"]["ports"][0]["port"]
        with urllib.request.urlopen(f"http://{svc['spec']['clusterIP']}:{port}/healthz", timeout=5) as resp:
            assert resp.status == 200
    finally:
        down = tilt.run_tilt(env, ["down", "--delete-namespaces"], logs / "tilt-down.log", timeout_s=300)
        tilt.release(state)  # the Docker API and the registry: the next test finds the stack as it was
        assert down.returncode == 0, down.stdout[-3000:]
        _wait_gone(real_node_stack.kubeconfig)


def _wait_gone(kubeconfig: str, timeout_s: float = 180) -> None:
    """`tilt down` does not wait: the namespaces' deletion finishes before the next test uses the stack."""
    deadline = time.monotonic() + timeout_s
    while True:
        names = {n["metadata"]["name"] for n in kubectl(kubeconfig, "get", "namespaces")["items"]}
        left = names & set(NAMESPACES)
        if not left:
            return
        assert time.monotonic() < deadline, f"{sorted(left)} still there {timeout_s:.0f}s after tilt down"
        time.sleep(1)

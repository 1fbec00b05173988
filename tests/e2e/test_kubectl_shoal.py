"""`kubectl shoal` on the real stack, as `kubectl-shoal` and through the real kubectl binary (which runs
`kubectl-<name>` from PATH): explain, queues, events (also --follow) and top, with the api service reachable,
and without it (nothing at the URL; no `shoal-api` Service for the apiserver's proxy) reading the cluster."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_helpers import eventually
from scenario_helpers import create, pod, podgroup, wait_running
from test_api import api_url  # noqa: F401 - the fixture: a shoal-api process on the session's topics

from shoal.devstack import paths
from shoal.devstack.procs import free_port

PLUGIN = Path(sys.executable).parent / "kubectl-shoal"
THREE_OF_FIVE = "Resources were found for 3 pods while 5 are required for gang scheduling"


@pytest.fixture
def env(stack: Any, namespace: str, tmp_path: Path) -> dict[str, str]:
    """kubectl's environment: $KUBECONFIG a copy of the stack's whose context names the test's namespace, the
    plugin on PATH, no $SHOAL_API_URL."""
    config = yaml.safe_load(Path(stack.kubeconfig).read_text())
    current = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    current["context"]["namespace"] = namespace
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    out = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    out.update(KUBECONFIG=str(kubeconfig), PATH=f"{PLUGIN.parent}{os.pathsep}{out.get('PATH', '')}")
    return out


async def run(env: dict[str, str], *argv: str, kubectl: bool = False) -> tuple[int, str, str]:
    command = [str(paths.k8s_bin("kubectl")), "shoal", *argv] if kubectl else [str(PLUGIN), *argv]
    done = await asyncio.to_thread(subprocess.run, command, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


async def workload(kube: Any, namespace: str, queue: str, pool: str) -> None:
    """One 1-GPU pod bound, then a 5-pod gang that cannot fit in the 3 GPUs left."""
    await create(kube, pod(namespace, "solo", queue, pool))
    await wait_running(kube, namespace, ["solo"], timeout_s=120)
    await create(kube, podgroup(namespace, "gang", queue, pool, min_member=5),
                 *(pod(namespace, f"gang-{i}", queue, pool, group="gang") for i in range(5)))


async def test_kubectl_shoal_with_the_api(api_url, env, shoal, kube, namespace, queue, node_pool,  # noqa: F811
                                          gpu_nodes):
    assert PLUGIN.is_file(), f"{PLUGIN}: the package's console script is not installed"
    await gpu_nodes(2, gpus=2)
    await workload(kube, namespace, queue, node_pool)
    api = ("--api", api_url)

    async def explained():
        code, out, err = await run(env, "explain", "gang-0", *api)  # the namespace is the context's
        return (out, err) if code == 0 and THREE_OF_FIVE in out and "fair share" in out else None

    out, err = await eventually(explained, timeout_s=120, interval_s=2, what="kubectl-shoal explain")
    assert out.startswith(f"{namespace}/gang-0: pending: ") and "no api service" not in err

    async def queue_figures():
        code, out, _ = await run(env, "queues", "-o", "json", *api, kubectl=True)
        shard = json.loads(out)["shards"].get(node_pool) if code == 0 else None
        gpu = shard["queues"].get(queue, {}).get("gpu") if shard else None
        return gpu if gpu and gpu["allocated"] == 1 else None

    gpu = await eventually(queue_figures, timeout_s=120, interval_s=2, what="kubectl shoal queues")
    assert gpu["fairShare"] == 4 and gpu["request"] == 6
    code, out, err = await run(env, "queues", *api, kubectl=True)
    assert code == 0 and any(line.split()[:2] == [node_pool, queue] for line in out.splitlines()), out + err

    code, out, err = await run(env, "events", "-o", "json", *api, kubectl=True)
    decisions = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and decisions, err
    kinds = {(d["type"].rsplit(".", 1)[-1], d["subject"]) for d in decisions}
    assert ("unschedulable", f"{namespace}/gang") in kinds and ("bound", f"{namespace}/solo") in kinds
    assert all(d["subject"].startswith(f"{namespace}/") for d in decisions)  # -n: the context's namespace
    code, out, _ = await run(env, "events", "-n", "kube-system", *api)
    assert code == 0 and namespace not in out
    code, out, _ = await run(env, "events", "-A", *api)
    assert code == 0 and any(line.split()[1:3] == ["unschedulable", f"{namespace}/gang"] for line in out.splitlines())

    # --follow: decisions made after it started
    follow = subprocess.Popen([str(PLUGIN), "events", "--follow", *api], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        await asyncio.sleep(3)
        await create(kube, pod(namespace, "late", queue, node_pool))
        line = await asyncio.wait_for(asyncio.to_thread(_line_with, follow, f"{namespace}/late"), 120)
        assert "scheduled" in line or "bound" in line, line
    finally:
        follow.terminate()
        follow.wait(10)

    code, out, err = await run(env, "top", "-o", "wide", *api, kubectl=True)
    assert code == 0, err
    queues_part, nodes_part = out.split("\n\n")
    assert any(line.split()[:2] == [queue, node_pool] for line in queues_part.splitlines()), out
    rows = [line.split() for line in nodes_part.splitlines() if line.startswith(f"{node_pool}-n")]
    assert len(rows) == 2 and sum(float(r[3]) for r in rows) == 2 and {r[2] for r in rows} == {"2"}, out


def _line_with(proc: subprocess.Popen, text: str) -> str:
    assert proc.stdout is not None
    for line in proc.stdout:
        if text in line:
            return line
    raise AssertionError(f"the stream ended without {text!r}: {proc.stderr.read() if proc.stderr else ''}")


async def test_kubectl_shoal_without_the_api_reads_the_cluster(env, shoal, kube, namespace, queue, node_pool,
                                                               gpu_nodes):
    await gpu_nodes(2, gpus=2)
    await workload(kube, namespace, queue, node_pool)
    nothing = ("--api", f"http://127.0.0.1:{free_port()}")

    async def explained():
        code, out, err = await run(env, "explain", "gang", *nothing, kubectl=True)
        return (out, err) if code == 0 and THREE_OF_FIVE in out else None

    out, err = await eventually(explained, timeout_s=120, interval_s=2, what="kubectl shoal explain (no api)")
    assert "no api service" in err and "from the cluster directly" in err and err.count("\n") == 1
    assert out.startswith(f"{namespace}/gang: pending: ")

    # no --api and no $SHOAL_API_URL: the apiserver's proxy finds no shoal-api Service
    async def queue_figures():
        code, out, err = await run(env, "queues", "-o", "json")
        gpu = json.loads(out)["shards"].get("-", {}).get("queues", {}).get(queue, {}).get("gpu") if code == 0 else None
        return (gpu, err) if gpu and gpu["allocated"] == 1 else None

    gpu, err = await eventually(queue_figures, timeout_s=120, interval_s=2, what="kubectl-shoal queues (no api)")
    assert "service shoal-system/shoal-api (through the apiserver)" in err and gpu["limit"] == -1

    code, out, err = await run(env, "events", "-o", "yaml", *nothing, kubectl=True)
    documents = [d for d in yaml.safe_load_all(out) if d]
    assert code == 0 and "no api service" in err
    assert any(d["reason"] == "Unschedulable" and d["object"].startswith("Pod/gang-") for d in documents), out
    assert any(d["reason"] == "Scheduled" and d["object"] == "Pod/solo" for d in documents), out

    # --follow without the api: the events are listed again, new ones printed
    follow = subprocess.Popen([str(PLUGIN), "events", "-f", *nothing], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        await asyncio.sleep(3)
        await create(kube, pod(namespace, "late", queue, node_pool))
        line = await asyncio.wait_for(asyncio.to_thread(_line_with, follow, "Pod/late"), 120)
        assert "Scheduled" in line, line
    finally:
        follow.terminate()
        follow.wait(10)

    code, out, err = await run(env, "top", "queues", *nothing)
    assert code == 0 and "no api service" in err
    assert any(line.split()[:3] == [queue, "-", "2"] for line in out.splitlines()), out  # solo and late
    code, out, _ = await run(env, "top", "nodes", "-o", "json", *nothing)
    rows = [r for r in json.loads(out)["nodes"] if r["pool"] == node_pool]
    assert code == 0 and len(rows) == 2 and sum(r["used"] for r in rows) == 2 and sum(r["free"] for r in rows) == 2

"""Shoal's own services on the local stack: install the base objects, start each service as its own
supervised process, wait for its /readyz.

    await install_base(kubeconfig)                  # CRDs, PriorityClasses, namespaces (deploy/k8s/base)
    pids = start_services(state_dir, stack.env())   # every service in SERVICES
    stop_services(state_dir, pids)

Used by `shoal dev up` (with the demo) and by the end-to-end tests (with a topic prefix per run).
"""

from __future__ import annotations

import asyncio
import sys
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from shoal.core.fields import items
from shoal.devstack.bytecode import ensure_bytecode
from shoal.devstack.paths import REPO
from shoal.devstack.procs import ProcessSpec, free_port, launch, stop_process, wait_ready

SERVICES = ("snapshotter", "podgrouper", "fairshare", "planner", "binder", "nodeagent", "admission", "api")
BASE = REPO / "deploy" / "k8s" / "base"
BASE_FILES = (
    "crds/scheduling.run.ai_queues.yaml",
    "crds/scheduling.run.ai_podgroups.yaml",
    "crds/kai.scheduler_topologies.yaml",
    "priorityclasses.yaml",
    "namespaces.yaml",
)

SERVICE_ENV: dict[str, dict[str, str]] = {
    "nodeagent": {"SHOAL_ALL_FAKE_NODES": "true", "SHOAL_BACKEND": "fake"},
    # HTTPS on a free port with a self-signed CA; registers its webhooks (named per topic prefix) itself
    "admission": {"SHOAL_WEBHOOK_PORT": "0", "SHOAL_WEBHOOK_REGISTER": "true"},
}


def _ready(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:  # noqa: S310 - loopback
        return resp.status == 200


def service_spec(name: str, env: Mapping[str, str], *, port: int | None = None,
                 state_dir: Path | None = None) -> ProcessSpec:
    """How to launch one service; with `state_dir`, the fake node agent keeps its GPU allocations there (the
    fake device plugin's checkpoint, kept across its restarts) instead of annotating every whole-GPU pod."""
    ensure_bytecode()  # else each launch compiles its imports from source (PYTHONDONTWRITEBYTECODE=1)
    port = port or free_port()
    on_node = {"SHOAL_FAKE_DEVICE_DIR": str(state_dir / "fake-devices")} if name == "nodeagent" and state_dir else {}
    full = {
        **on_node,
        **env,
        **SERVICE_ENV.get(name, {}),
        "SHOAL_HTTP_PORT": str(port),
        "SHOAL_HTTP_HOST": "127.0.0.1",
        "PYTHONUNBUFFERED": "1",
    }
    return ProcessSpec(
        name=f"shoal-{name}",
        argv=[sys.executable, "-m", f"services.{name}"],
        env=full,
        cwd=str(REPO),
        ready=lambda: _ready(port),
        ready_timeout_s=90.0,
    )


def start_services(
    state_dir: Path, env: Mapping[str, str], *, names: Iterable[str] = SERVICES, tie_to_parent: bool = False,
    ports: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Launch every service at once (on the HTTP port `ports` names, else a free one), then wait for each one's
    readiness; returns name → pid."""
    specs = [service_spec(name, env, port=(ports or {}).get(name), state_dir=state_dir) for name in names]
    pids = {spec.name: launch(state_dir, spec, tie_to_parent=tie_to_parent) for spec in specs}
    for spec in specs:
        wait_ready(state_dir, spec, pids[spec.name])
    return pids


def stop_services(state_dir: Path, names: Iterable[str]) -> None:
    for name in names:
        stop_process(state_dir, name)


def base_documents() -> list[dict]:
    docs: list[dict] = []
    for rel in BASE_FILES:
        docs.extend(d for d in yaml.safe_load_all((BASE / rel).read_text()) if d)
    return docs


async def install_base(kubeconfig: str, *, timeout_s: float = 60.0) -> None:
    """Create (or update) Shoal's CRDs, PriorityClasses and namespaces; wait until the CRDs are served."""
    from shoal.adapters import kube as k
    from shoal.errors import ConflictError
    from shoal.settings import KubeSettings

    crd = k.Resource(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
    )
    kinds = {"CustomResourceDefinition": crd, "PriorityClass": k.PRIORITY_CLASSES, "Namespace": k.NAMESPACES}
    api = await k.connect_kube(KubeSettings(kubeconfig=kubeconfig))
    kube = k.Kube(api)
    try:
        for doc in base_documents():
            resource = kinds.get(doc.get("kind", ""))
            if resource is None:
                continue
            try:
                await kube.create(resource, doc)
            except ConflictError:
                if resource is crd:
                    current = await kube.get(crd, doc["metadata"]["name"])
                    doc["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                    await kube.replace(crd, doc)
        names = [
            d["metadata"]["name"] for d in base_documents() if d.get("kind") == "CustomResourceDefinition"
        ]
        deadline = asyncio.get_running_loop().time() + timeout_s
        for name in names:
            while True:
                conds = items(await kube.get(crd, name), "status", "conditions")
                if any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
                    break
                if asyncio.get_running_loop().time() > deadline:
                    raise TimeoutError(f"CRD {name} not established after {timeout_s:.0f}s")
                await asyncio.sleep(0.2)
    finally:
        await api.close()

"""Shoal installed into the local cluster the way a user installs it: the images built from docker/Dockerfile
pushed to a registry, `kubectl apply -k` of deploy/k8s/overlays/dev, every workload Ready. The cluster needs
a real node (`shoal dev up --real-node`) whose containerd pulls from that registry.

    registry = stack_registry(state)                       # shoal.devstack.registry (`down` stops it)
    realnode.trust_registry(state, registry)
    images = publish(registry, say)                        # kustomize `images:` entries
    overlay = write_overlay(state / "incluster", images, {"SHOAL_RESERVATION_IMAGE": realnode.PAUSE_IMAGE})
    apply(kubeconfig, overlay, say); wait_ready(kubeconfig, say)
    remove(kubeconfig, overlay, say)

The overlay written here (also Tilt's, devstack/tilt.py) only names images (and, optionally, settings) on top of
deploy/k8s/overlays/dev, as a user's own overlay would: the service images by digest (always the ones just
built), the dev overlay's third-party images by local stand-ins (`standin_images`), as no public registry is
reachable here; and it keeps the node agent on nodes with a kubelet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import yaml

from shoal.core.fields import items, mapping, text, value_at
from shoal.devstack import paths
from shoal.devstack.errors import DevStackError
from shoal.devstack.images import build_images, push_images
from shoal.devstack.realnode.config import REAL_NODE_LABEL
from shoal.devstack.scheduler import REPO
from shoal.devstack.standin_images import ensure_standins, standin_overrides

DEV_OVERLAY = REPO / "deploy" / "k8s" / "overlays" / "dev"
SYSTEM_NS, NODE_NS = "shoal-system", "shoal-node"
CERTGEN_JOB = "shoal-admission-certgen"
NODE_AGENT = "shoal-nodeagent"


def _say_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def publish(registry: str, say: Callable[[str], None] | None = None) -> list[dict[str, str]]:
    """Build (when changed) and push the eight service images and the stand-ins: kustomize `images:` entries
    that name them (Shoal's by digest: always the images just built)."""
    say = say or _say_stderr
    services = push_images(build_images(say=say), registry, say=say)
    entries = []
    for image in services:
        repo, _, digest = image.pinned.partition("@")
        entries.append({"name": f"shoal-{image.service}", "newName": repo, "digest": digest})
    return entries + standin_overrides(push_images(ensure_standins(say), registry, say=say))


def write_overlay(directory: Path, images: Sequence[Mapping[str, str]],
                  settings: Mapping[str, str] | None = None) -> Path:
    """`<directory>/kustomization.yaml`: deploy/k8s/overlays/dev with `images` (kustomize `images:` entries),
    the node agent on nodes that have a kubelet (the stack's fake GPU nodes have none) and `settings` in both
    shoal-config ConfigMaps; returns `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    on_real_nodes = [{"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {REAL_NODE_LABEL: "true"}}]
    patches: list[dict] = [{"target": {"kind": "DaemonSet", "name": NODE_AGENT}, "patch": json.dumps(on_real_nodes)}]
    if settings:
        ops = [{"op": "add", "path": f"/data/{key}", "value": value} for key, value in sorted(settings.items())]
        patches += [{"target": {"kind": "ConfigMap", "name": "shoal-config", "namespace": namespace},
                     "patch": json.dumps(ops)} for namespace in (SYSTEM_NS, NODE_NS)]
    doc = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
           # kustomize takes only relative paths to other kustomizations
           "resources": [os.path.relpath(DEV_OVERLAY, directory)], "images": [dict(i) for i in images],
           "patches": patches}
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return directory


def kubectl(kubeconfig: str | Path, *args: str, timeout_s: float = 120, check: bool = True) -> str:
    try:
        done = subprocess.run([str(paths.k8s_bin("kubectl")), "--kubeconfig", str(kubeconfig), *args],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise DevStackError(f"kubectl {' '.join(args[:3])} did not finish within {timeout_s:.0f}s") from None
    if check and done.returncode != 0:
        raise DevStackError(f"kubectl {' '.join(args[:3])} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def apply(kubeconfig: str | Path, overlay: Path, say: Callable[[str], None] | None = None) -> None:
    """`kubectl apply -k` (server-side: the CRDs are too large for the last-applied annotation)."""
    (say or _say_stderr)(f"incluster: kubectl apply -k {overlay}")
    kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-k", str(overlay))


def wait_ready(kubeconfig: str | Path, say: Callable[[str], None] | None = None, *, timeout_s: float = 420) -> float:
    """Wait for the webhook certificate Job, every Deployment in shoal-system and the node agent DaemonSet;
    the seconds it took. On timeout, DevStackError names what is not Ready (and why, from its pods)."""
    say = say or _say_stderr
    began = time.monotonic()
    deadline = began + timeout_s
    workloads = [f"deployment/{name.split('/', 1)[1]}" for name in
                 kubectl(kubeconfig, "-n", SYSTEM_NS, "get", "deployments", "-o", "name").split()]
    waits = [(SYSTEM_NS, f"job/{CERTGEN_JOB}", ["wait", "--for=condition=complete"]),
             *((SYSTEM_NS, w, ["rollout", "status"]) for w in workloads),
             (NODE_NS, f"daemonset/{NODE_AGENT}", ["rollout", "status"])]
    for namespace, workload, verb in waits:
        left = deadline - time.monotonic()
        try:
            kubectl(kubeconfig, "-n", namespace, *verb, workload, f"--timeout={max(1, int(left))}s",
                    timeout_s=max(5.0, left + 30))
        except DevStackError as exc:
            raise DevStackError(f"{namespace}/{workload} not ready after {time.monotonic() - began:.0f}s: "
                                f"{exc}; {not_ready(kubeconfig)}") from None
        say(f"incluster: {namespace}/{workload} ready ({time.monotonic() - began:.0f}s)")
    return time.monotonic() - began


def not_ready(kubeconfig: str | Path) -> str:
    """One line per pod of Shoal's namespaces that is not Ready, with its waiting reason and message."""
    out = []
    for namespace in (SYSTEM_NS, NODE_NS):
        pods = json.loads(kubectl(kubeconfig, "-n", namespace, "get", "pods", "-o", "json", check=False) or "{}")
        for pod in items(pods, "items"):
            conditions = {value_at(c, "type"): value_at(c, "status") for c in items(pod, "status", "conditions")}
            if conditions.get("Ready") == "True" or value_at(pod, "status", "phase") == "Succeeded":
                continue
            why = [f"{text(s, 'name')}: {w.get('reason')} {text(w, 'message')[:160]}".strip()
                   for s in items(pod, "status", "containerStatuses")
                   for w in (mapping(s, "state", "waiting"),) if w]
            out.append(f"{namespace}/{text(pod, 'metadata', 'name')} {value_at(pod, 'status', 'phase')} "
                       f"{'; '.join(why) or value_at(pod, 'status', 'message') or ''}".strip())
    return "pods not ready: " + (" | ".join(out) if out else "none")


def remove(kubeconfig: str | Path, overlay: Path, say: Callable[[str], None] | None = None) -> None:
    """`kubectl delete -k`, waiting until its namespaces are gone."""
    (say or _say_stderr)(f"incluster: kubectl delete -k {overlay}")
    kubectl(kubeconfig, "delete", "--ignore-not-found", "--wait=true", "--timeout=180s", "-k", str(overlay),
            timeout_s=240)

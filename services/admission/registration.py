"""The webhook configurations the service registers itself (local stack, tests): pods (mutate, validate),
queues and PodGroups (validate), pointing at `url: https://<host>:<port>/<path>` with the CA as caBundle.

Validation fails closed (failurePolicy Fail), mutation fails open (Ignore); pod hooks only see pods with
Shoal's scheduler names (matchConditions) outside the system namespaces, optionally narrowed by a namespace
label selector; the queue hook can be narrowed with an object label selector.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from shoal.adapters import kube as k
from shoal.core.model import DEFAULT_RESERVATION_NAMESPACE
from shoal.errors import ConflictError, NotFoundError

MUTATING = k.Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                      "MutatingWebhookConfiguration", namespaced=False)
VALIDATING = k.Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                        "ValidatingWebhookConfiguration", namespaced=False)
SYSTEM_NAMESPACES = ("kube-system", "kube-node-lease", "shoal-system")  # and the reservation namespace
SELF_REGISTERED = "shoal.io/self-registered"
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
SEMI_PREEMPTIBLE_CONDITION = ("has(oldObject.spec.preemptibility) && "
                              "oldObject.spec.preemptibility == 'semi-preemptible'")


def instance_name(config_name: str, topic_prefix: str) -> str:
    """The configurations' name: one per Shoal instance (several stacks can share one apiserver)."""
    suffix = re.sub(r"[^a-z0-9-]+", "-", topic_prefix.lower()).strip("-")
    return f"{config_name}-{suffix}"[:253] if suffix else config_name


def match_labels(selector: str) -> dict[str, str]:
    """`a=b,c=d` → {"a": "b", "c": "d"} (entries without '=' are ignored)."""
    out = {}
    for part in selector.split(","):
        key, sep, value = part.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def _namespaces(namespace_selector: str, reservation_namespace: str) -> dict:
    """Every namespace but the system ones and the reservation pods', narrowed by `namespace_selector`."""
    selector: dict = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                            "values": [*SYSTEM_NAMESPACES, reservation_namespace]}]}
    if namespace_selector:
        selector["matchLabels"] = match_labels(namespace_selector)
    return selector


def _pod_hook(name: str, url: str, ca: str, policy: str, timeout_s: int, scheduler_names: tuple[str, ...],
              selector: dict) -> dict:
    names = ", ".join(f"'{n}'" for n in scheduler_names)
    return {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": policy,
            "timeoutSeconds": timeout_s, "clientConfig": {"url": url, "caBundle": ca},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": selector,
            "matchConditions": [{"name": "scheduled-by-shoal",
                                 "expression": f"has(object.spec.schedulerName) && "
                                               f"object.spec.schedulerName in [{names}]"}]}


def _podgroup_hook(url: str, ca: str, timeout_s: int, selector: dict) -> dict:
    """UPDATEs of semi-preemptible PodGroups only (matchConditions), so no other PodGroup write depends on
    the webhook being up."""
    return {"name": "podgroups.validate.shoal.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": timeout_s, "clientConfig": {"url": url, "caBundle": ca},
            "rules": [{"apiGroups": ["scheduling.run.ai"], "apiVersions": ["v2alpha2"], "operations": ["UPDATE"],
                       "resources": ["podgroups"], "scope": "Namespaced"}],
            "namespaceSelector": selector,
            "matchConditions": [{"name": "semi-preemptible", "expression": SEMI_PREEMPTIBLE_CONDITION}]}


def configurations(name: str, base_url: str, ca_pem: bytes, *, timeout_s: int = 5,
                   scheduler_names: tuple[str, ...] = ("shoal-scheduler",), namespace_selector: str = "",
                   queue_selector: str = "",
                   reservation_namespace: str = DEFAULT_RESERVATION_NAMESPACE) -> tuple[dict, dict]:
    """(MutatingWebhookConfiguration, ValidatingWebhookConfiguration) manifests."""
    ca = base64.b64encode(ca_pem).decode()
    namespaces = _namespaces(namespace_selector, reservation_namespace)
    meta = {"name": name, "labels": {"app.kubernetes.io/part-of": "shoal",
                                     "app.kubernetes.io/component": "admission", SELF_REGISTERED: "true"}}
    mutating = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": dict(meta),
                "webhooks": [{**_pod_hook("pods.mutate.shoal.io", f"{base_url}/mutate-pods", ca, "Ignore",
                                          timeout_s, scheduler_names, namespaces),
                              "reinvocationPolicy": "Never"}]}
    queue_hook: dict = {
        "name": "queues.validate.shoal.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "failurePolicy": "Fail", "timeoutSeconds": timeout_s,
        "clientConfig": {"url": f"{base_url}/validate-queues", "caBundle": ca},
        "rules": [{"apiGroups": ["scheduling.run.ai"], "apiVersions": ["v2"],
                   "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["queues"], "scope": "Cluster"}]}
    if queue_selector:
        queue_hook["objectSelector"] = {"matchLabels": match_labels(queue_selector)}
    podgroup_hook = _podgroup_hook(f"{base_url}/validate-podgroups", ca, timeout_s, namespaces)
    validating = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                  "metadata": dict(meta),
                  "webhooks": [_pod_hook("pods.validate.shoal.io", f"{base_url}/validate-pods", ca, "Fail",
                                         timeout_s, scheduler_names, namespaces), queue_hook,
                               podgroup_hook]}
    return mutating, validating


async def apply(kube: k.Kube, resource: k.Resource, body: Mapping) -> None:
    """Create, or replace what is there (re-read on conflict)."""
    for _ in range(5):
        try:
            await kube.create(resource, body, idempotent=True)
            return
        except ConflictError:
            pass
        try:
            current = await kube.get(resource, body["metadata"]["name"])
        except NotFoundError:
            continue
        replacement = {**body, "metadata": {**body["metadata"],
                                            "resourceVersion": current["metadata"]["resourceVersion"]}}
        try:
            await kube.replace(resource, replacement)
            return
        except (ConflictError, NotFoundError):
            continue
    raise ConflictError(f"could not register {resource.kind} {body['metadata']['name']}: kept conflicting")


async def register(kube: k.Kube, mutating: dict, validating: dict) -> None:
    await apply(kube, VALIDATING, validating)
    await apply(kube, MUTATING, mutating)


async def unregister(kube: k.Kube, name: str) -> None:
    for resource in (MUTATING, VALIDATING):
        try:
            await kube.delete(resource, name)
        except NotFoundError:
            pass


async def _listening(host: str, port: int, timeout_s: float = 1.0) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), port), timeout_s)
    except (OSError, TimeoutError):
        return False
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return True


async def remove_stale(kube: k.Kube, keep: str) -> list[str]:
    """Delete self-registered configurations (other than `keep`) whose loopback endpoint no longer listens:
    left by an instance that was killed, they would otherwise make the apiserver refuse Shoal's pods."""
    removed = []
    for resource in (VALIDATING, MUTATING):
        items, _ = await kube.list(resource, label_selector=f"{SELF_REGISTERED}=true")
        for item in items:
            name = item["metadata"]["name"]
            urls = [urlsplit(str((h.get("clientConfig") or {}).get("url") or "")) for h in item.get("webhooks") or []]
            endpoints = {(u.hostname, u.port or 443) for u in urls if u.hostname}
            if name == keep or not endpoints or not all(host in LOOPBACK for host, _ in endpoints):
                continue
            alive = [await _listening(host, port) for host, port in endpoints]
            if not any(alive):
                try:
                    await kube.delete(resource, name)
                    removed.append(f"{resource.kind}/{name}")
                except NotFoundError:
                    pass
    return removed

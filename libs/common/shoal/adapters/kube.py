"""Kubernetes access with plain dicts (objects look as in YAML manifests) and Shoal's error mapping.

Usage::

    api = await connect_kube(settings.kube)          # kubeconfig path, $KUBECONFIG, ~/.kube/config or in-cluster
    kube = Kube(api)
    pod = await kube.get(PODS, "train-0", namespace="team-a")
    await kube.patch(PODGROUPS, "pg-1", {"status": {...}}, namespace="team-a", subresource="status")
    await kube.create(BINDINGS_OF_PODS, {...}, namespace="team-a", name="train-0")   # POST pods/<name>/binding
    items, rv = await kube.list(QUEUES)
    async for event in ListWatch(kube, PODS):         # shoal.adapters.kube_watch
        ...
    await api.close()

Errors: 429, 5xx, timeouts and connection errors raise `TransientError`; 409 `ConflictError` (re-read);
404 `NotFoundError`; 410 `Expired`; 400/401/403/422 and the rest `PermanentError`. Reads are retried on
transient errors with `shoal.retry`; writes are retried only when the caller says they are idempotent.
Typed kubernetes_asyncio calls can use the same mapping: `await kube_call(lambda: core.read_node(name))`.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import os
import platform
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import aiohttp
import msgspec
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

from shoal.errors import ConfigError, ConflictError, NotFoundError, PermanentError, ShoalError, TransientError
from shoal.retry import RetryPolicy, retry_transient
from shoal.settings import KubeSettings

T = TypeVar("T")

KUBE_RETRY = RetryPolicy(attempts=5, initial_s=0.1, max_backoff_s=3.0, max_elapsed_s=30.0)
MERGE_PATCH = "application/merge-patch+json"


class Expired(PermanentError):
    """HTTP 410 Gone: the resourceVersion or continue token is too old; list again."""


@dataclass(frozen=True, slots=True)
class Resource:
    """A kind the API serves: core (`group=""`) or any API group, custom resources included."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
EVENTS = Resource("events.k8s.io", "v1", "events", "Event")
CORE_EVENTS = Resource("", "v1", "events", "Event")  # core/v1 events, as KAI's components write them
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
RUNTIME_CLASSES = Resource("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", namespaced=False)
JOBS = Resource("batch", "v1", "jobs", "Job")
QUEUES = Resource("scheduling.run.ai", "v2", "queues", "Queue", namespaced=False)
PODGROUPS = Resource("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup")
BINDREQUESTS = Resource("scheduling.run.ai", "v1alpha2", "bindrequests", "BindRequest")
TOPOLOGIES = Resource("kai.scheduler", "v1alpha1", "topologies", "Topology", namespaced=False)
TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)
SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview",
                                  namespaced=False)
SELF_SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io", "v1", "selfsubjectaccessreviews",
                                       "SelfSubjectAccessReview", namespaced=False)


def _status_message(body: bytes | str | None) -> str:
    if not body:
        return ""
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return (body.decode(errors="replace") if isinstance(body, bytes) else body)[:500]
    return str(doc.get("message", "")) if isinstance(doc, dict) else ""


def error_for_status(status: int, message: str, what: str = "") -> ShoalError:
    """The Shoal error for an HTTP status from the apiserver."""
    text = f"kube {what}: {status} {message}".strip()
    if status == 409:
        return ConflictError(text, status=status)
    if status == 404:
        return NotFoundError(text, status=status)
    if status == 410:
        return Expired(text, status=status)
    if status == 429 or status >= 500 or status == 0:
        return TransientError(text, status=status)
    return PermanentError(text, status=status)


def kube_error(exc: BaseException, what: str = "") -> ShoalError:
    """Map a kubernetes_asyncio/aiohttp error to Shoal's hierarchy (see the module docstring)."""
    if isinstance(exc, ShoalError):
        return exc
    if isinstance(exc, ApiException):
        return error_for_status(exc.status or 0, _status_message(exc.body) or str(exc.reason or ""), what)
    if isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | ConnectionError | OSError):
        return TransientError(f"kube {what}: {type(exc).__name__}: {exc}")
    return PermanentError(f"kube {what}: {type(exc).__name__}: {exc}")


async def kube_call(operation: Callable[[], Awaitable[T]], *, idempotent: bool = True, what: str = "call",
                    policy: RetryPolicy = KUBE_RETRY) -> T:
    """Run one API call with the error mapping; retry transient errors only if `idempotent`."""

    async def mapped() -> T:
        try:
            return await operation()
        except (TimeoutError, ApiException, aiohttp.ClientError, OSError) as exc:
            raise kube_error(exc, what) from exc

    if not idempotent:
        return await mapped()
    return await retry_transient(mapped, policy=policy, what=f"kube:{what}")


def kubeconfig_path(settings: KubeSettings) -> Path | None:
    """The kubeconfig file to use (settings, then $KUBECONFIG, then ~/.kube/config); None: in-cluster. One named
    in the settings is the one used: when it is missing that is an error, never another cluster's kubeconfig."""
    if settings.in_cluster:
        return None
    if settings.kubeconfig:
        named = Path(settings.kubeconfig).expanduser()
        if not named.is_file():
            raise ConfigError([f"SHOAL_KUBE_KUBECONFIG (or SHOAL_KUBECONFIG): {settings.kubeconfig} does not exist"])
        return named
    candidates = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)
    candidates.append(str(Path.home() / ".kube" / "config"))
    for candidate in candidates:
        if candidate and Path(candidate).expanduser().is_file():
            return Path(candidate).expanduser()
    return None


def config_source(settings: KubeSettings, path: Path | None) -> str:
    """Where the client configuration comes from, for messages: a kubeconfig file or the pod's service account."""
    if path is not None:
        return f"kubeconfig {path}"
    if settings.in_cluster:
        return "in-cluster (SHOAL_KUBE_IN_CLUSTER)"
    return f"in-cluster (no kubeconfig at $KUBECONFIG or {Path.home() / '.kube' / 'config'})"


def user_agent(component: str) -> str:
    """`shoal-<component>/<version> (<os>/<arch>)`: the User-Agent the apiserver's audit log names the client by
    (every Shoal process used the generated client's own, so requests could not be told apart)."""
    try:
        version = importlib.metadata.version("shoal")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return f"shoal-{component}/{version} ({platform.system().lower()}/{platform.machine()})"


async def connect_kube(settings: KubeSettings, *, component: str = "cli") -> client.ApiClient:
    """An ApiClient from the kubeconfig (settings, then $KUBECONFIG, then ~/.kube/config) or in-cluster, naming
    itself as `component` (`user_agent`)."""
    cfg = client.Configuration()
    path = kubeconfig_path(settings)
    try:
        if path is not None:
            await config.load_kube_config(config_file=str(path), context=settings.context,
                                          client_configuration=cfg)
        else:
            config.load_incluster_config(client_configuration=cfg)
    except ConfigException as exc:
        raise ConfigError([f"kubernetes client configuration, {config_source(settings, path)}: {exc}"]) from exc
    api = client.ApiClient(configuration=cfg)
    api.user_agent = user_agent(component)
    skip_proxy_lookup(api)
    return api


def skip_proxy_lookup(api: client.ApiClient) -> None:
    """kubernetes_asyncio's session trusts the environment, so aiohttp re-reads the proxy variables and parses
    ~/.netrc on every request, in a thread (~15 % of the binder's CPU, ~40 % of the dev stack's fake kubelet's);
    with no proxy configured there is nothing to find, so the session stops looking. A proxy in the
    environment keeps the lookup."""
    if not api.configuration.proxy and not _proxy_in_env():
        api.rest_client.pool_manager._trust_env = False  # noqa: SLF001 - aiohttp has no setter


async def bearer_token(api: client.ApiClient) -> str | None:
    """The bearer token `api` authenticates with (a kubeconfig's token or tokenFile, an exec plugin's, the
    pod's service account), refreshed first where the loader can; None for client certificates, passwords."""
    cfg = api.configuration
    if cfg.refresh_api_key_hook is not None:
        refreshed = cfg.refresh_api_key_hook(cfg)
        if inspect.isawaitable(refreshed):
            await refreshed
    scheme, _, token = str(cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization") or "").partition(" ")
    if scheme.lower() != "bearer":  # a username and password come as Basic: nothing to pass on
        return None
    return token.strip() or None


_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy")


def _proxy_in_env() -> bool:
    return any(os.environ.get(v) or os.environ.get(v.upper()) for v in _PROXY_VARIABLES)


class Kube:
    """Raw-dict access to any resource; every call maps errors, reads retry transient failures."""

    def __init__(self, api: client.ApiClient, *, request_timeout_s: float = 30.0) -> None:
        self.api = api
        self.request_timeout_s = request_timeout_s

    async def open(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                   body: Any = None, content_type: str = "application/json",
                   timeout: aiohttp.ClientTimeout | float | None = None,
                   headers: Mapping[str, str] | None = None) -> aiohttp.ClientResponse:
        """Send a request; returns the open streaming response (2xx only), or raises the mapped error.

        Sent on the ApiClient's own aiohttp session (its TLS, proxy and auth settings) without its generic
        request builder, which walks every body to sanitise it and encodes it with the json module: the
        bodies here are plain JSON already, and msgspec encodes them in a fraction of the time."""
        params = [(k, str(v).lower() if isinstance(v, bool) else str(v))
                  for k, v in (query or {}).items() if v is not None]
        api = self.api
        rest = api.rest_client
        sent = {**api.default_headers, "Accept": "application/json", "Content-Type": content_type, **(headers or {})}
        if api.cookie:
            sent["Cookie"] = api.cookie
        limit = timeout if timeout is not None else self.request_timeout_s
        extra: dict[str, Any] = {}
        if rest.proxy:
            extra["proxy"] = rest.proxy
        if rest.proxy_headers:
            extra["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            extra["server_hostname"] = rest.server_hostname
        try:
            await api.update_params_for_auth(sent, params, ["BearerToken"])  # a refreshed token, if any
            url = api.configuration.host + path + ("?" + urlencode(params) if params else "")
            response = await rest.pool_manager.request(
                method, url, headers=sent, data=msgspec.json.encode(body) if body is not None else None,
                timeout=limit if isinstance(limit, aiohttp.ClientTimeout) else aiohttp.ClientTimeout(total=limit),
                **extra)
        except (TimeoutError, ApiException, aiohttp.ClientError, OSError) as exc:
            raise kube_error(exc, f"{method} {path}") from exc
        if not 200 <= response.status < 300:
            try:
                data = await response.read()
            except (TimeoutError, aiohttp.ClientError):
                data = b""
            finally:
                response.release()
            raise error_for_status(response.status, _status_message(data), f"{method} {path}")
        return response

    async def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                      body: Any = None, content_type: str = "application/json", answer: bool = True) -> Any:
        """One request; the decoded JSON answer (a dict for objects, lists and Status), or None when the caller
        has no use for it (`answer=False`: a write's echo of the whole object is read but not decoded)."""
        response = await self.open(method, path, query=query, body=body, content_type=content_type)
        try:
            data = await response.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise kube_error(exc, f"{method} {path}") from exc
        finally:
            response.release()
        return msgspec.json.decode(data) if data and answer else None

    async def _call(self, idempotent: bool, what: str, method: str, path: str, **kwargs: Any) -> Any:
        return await kube_call(lambda: self.request(method, path, **kwargs), idempotent=idempotent, what=what)

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None,
                  subresource: str | None = None, cached: bool = False) -> dict[str, Any]:
        """One object; `cached`: as the apiserver's watch cache has it (resourceVersion=0: no etcd read, and
        possibly a few milliseconds behind)."""
        return await self._call(True, f"get {resource.plural}/{name}", "GET",
                                resource.path(namespace, name, subresource),
                                query={"resourceVersion": "0"} if cached else None)

    async def list(self, resource: Resource, *, namespace: str | None = None, label_selector: str | None = None,
                   field_selector: str | None = None, page_size: int = 500) -> tuple[list[dict[str, Any]], str]:
        """All objects (paged), each with apiVersion and kind set, and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        query: dict[str, Any] = {"labelSelector": label_selector, "fieldSelector": field_selector,
                                 "limit": page_size}
        while True:
            page = await self._call(True, f"list {resource.plural}", "GET", resource.path(namespace), query=query)
            for item in page.get("items") or ():
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", resource.kind)
                items.append(item)
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion", ""))
            query["continue"] = meta["continue"]

    async def create(self, resource: Resource, body: Mapping[str, Any], *, namespace: str | None = None,
                     name: str | None = None, subresource: str | None = None, idempotent: bool = False,
                     answer: bool = True) -> Any:
        """POST an object (or a subresource such as pods/<name>/binding or /eviction); `answer=False`: None."""
        return await self._call(idempotent, f"create {resource.plural}", "POST",
                                resource.path(namespace, name, subresource), body=dict(body), answer=answer)

    async def patch(self, resource: Resource, name: str, body: Mapping[str, Any], *,
                    namespace: str | None = None, subresource: str | None = None,
                    content_type: str = MERGE_PATCH, idempotent: bool = True, answer: bool = True) -> dict[str, Any]:
        """Merge-patch by default (a merge patch that sets fields is idempotent); `answer=False`: None."""
        return await self._call(idempotent, f"patch {resource.plural}/{name}", "PATCH",
                                resource.path(namespace, name, subresource), body=dict(body),
                                content_type=content_type, answer=answer)

    async def replace(self, resource: Resource, body: Mapping[str, Any], *, namespace: str | None = None,
                      subresource: str | None = None) -> dict[str, Any]:
        """PUT with the body's metadata.resourceVersion: a ConflictError means re-read and decide again."""
        name = body["metadata"]["name"]
        return await self._call(True, f"replace {resource.plural}/{name}", "PUT",
                                resource.path(namespace, name, subresource), body=dict(body))

    async def delete(self, resource: Resource, name: str, *, namespace: str | None = None,
                     body: Mapping[str, Any] | None = None) -> Any:
        return await self._call(True, f"delete {resource.plural}/{name}", "DELETE",
                                resource.path(namespace, name), body=dict(body) if body else None)

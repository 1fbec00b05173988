"""Who may read what on the api service: the caller's Kubernetes bearer token checked with a TokenReview, each
permission with a SubjectAccessReview (as kube-rbac-proxy does), both answers cached for `ttl_s` (bounded).

    access = Access(enabled=True, ttl_s=15, size=10_000)   # enabled=False: SHOAL_API_AUTH=none, all read all
    access.kube = Kube(api); await access.check_reviewer()  # NotReached when the api may not ask
    app.middlewares.append(access.middleware)         # /v1/* and /metrics: 401 without a valid token, 403 denied
    scope = await access.scope(request)               # what this caller may read
    await scope.reads("team-a")                       # True: get pods and podgroups in team-a are allowed

Permissions (deploy/k8s/base/rbac/viewers.yaml has the ClusterRoles that grant them):

    NAMESPACE  get pods and get podgroups.scheduling.run.ai in the namespace   ClusterRole shoal-viewer (RoleBinding)
    CLUSTER    get clusterviews.shoal.io (cluster-scoped): every queue, the GPU map, every namespace's decisions
                                                                              ClusterRole shoal-cluster-viewer
    METRICS    get on the non-resource URL /metrics                            ClusterRole shoal-metrics-reader

The token is read from `Authorization: Bearer …`, else from `X-Shoal-Authorization: Bearer …` (the apiserver's
service proxy drops the Authorization header once it has authenticated the caller; `kubectl shoal` sends both).
An apiserver that does not answer makes the request fail with 503, never succeed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from shoal.adapters.dependencies import NotReached
from shoal.adapters.kube import SELF_SUBJECT_ACCESS_REVIEWS, SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS, Kube
from shoal.errors import ShoalError
from shoal.logging import get_logger

log = get_logger("services.api")

TOKEN_HEADERS = ("Authorization", "X-Shoal-Authorization")
CLUSTER_ROUTES = ("/v1/queues", "/v1/cluster", "/v1/queue-tree", "/v1/history")  # need CLUSTER


@dataclass(frozen=True, slots=True)
class Permission:
    """One SubjectAccessReview: resource attributes, or a non-resource `path`."""

    verb: str
    resource: str = ""
    group: str = ""
    namespace: str = ""
    path: str = ""
    role: str = ""  # the ClusterRole that grants it, for messages

    def attributes(self) -> dict[str, Any]:
        if self.path:
            return {"nonResourceAttributes": {"path": self.path, "verb": self.verb}}
        attrs = {"verb": self.verb, "group": self.group, "resource": self.resource}
        return {"resourceAttributes": {**attrs, "namespace": self.namespace} if self.namespace else attrs}

    def text(self) -> str:
        if self.path:
            return f"{self.verb} {self.path}"
        what = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{self.verb} {what}" + (f" in namespace {self.namespace}" if self.namespace else " (cluster-wide)")

    def json(self) -> dict[str, Any]:
        return {"verb": self.verb, "resource": self.resource, "group": self.group, "namespace": self.namespace,
                "path": self.path, "clusterRole": self.role}


CLUSTER = Permission("get", "clusterviews", "shoal.io", role="shoal-cluster-viewer")
METRICS = Permission("get", path="/metrics", role="shoal-metrics-reader")


def namespace_permissions(namespace: str) -> tuple[Permission, Permission]:
    return (Permission("get", "pods", "", namespace, role="shoal-viewer"),
            Permission("get", "podgroups", "scheduling.run.ai", namespace, role="shoal-viewer"))


@dataclass(frozen=True, slots=True)
class Caller:
    """The user a TokenReview names."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def spec(self) -> dict[str, Any]:
        return {"user": self.username, "uid": self.uid, "groups": list(self.groups),
                "extra": {k: list(v) for k, v in self.extra}}


def _json_error(cls: type[web.HTTPException], message: str, **more: Any) -> web.HTTPException:
    return cls(text=json.dumps({"error": message, **more}), content_type="application/json")


class TtlCache:
    """At most `size` answers, each for `ttl_s`; the work behind a key runs once for concurrent callers, and
    a failed one is not kept."""

    def __init__(self, *, ttl_s: float, size: int) -> None:
        self.ttl_s, self.size = ttl_s, size
        self._items: OrderedDict[Any, tuple[float, asyncio.Task[Any]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    async def get(self, key: Any, work: Callable[[], Awaitable[Any]]) -> Any:
        now = time.monotonic()
        held = self._items.get(key)
        if held is None or held[0] < now or _failed(held[1]):
            held = (now + self.ttl_s, asyncio.ensure_future(work()))
            self._items[key] = held
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        try:
            return await asyncio.shield(held[1])  # a caller that goes away leaves the work to the others
        finally:
            if _failed(held[1]) and self._items.get(key) is held:
                del self._items[key]


def _failed(task: asyncio.Task[Any]) -> bool:
    return task.done() and (task.cancelled() or task.exception() is not None)


@dataclass
class Scope:
    """What one caller may read: everything (auth off, or CLUSTER granted), else namespace by namespace."""

    access: Access
    caller: Caller | None
    everything: bool

    async def reads(self, namespace: str) -> bool:
        if self.everything:
            return True
        if not namespace or self.caller is None:
            return False
        return await self.access.allowed_all(self.caller, namespace_permissions(namespace))

    async def keep(self, items: Iterable[Any], namespace_of: Callable[[Any], str]) -> list[Any]:
        """The items whose namespace this caller may read (each namespace asked once)."""
        items = list(items)
        if self.everything:
            return items
        answers = {ns: await self.reads(ns) for ns in dict.fromkeys(namespace_of(i) for i in items)}
        return [i for i in items if answers[namespace_of(i)]]


CALLER = web.RequestKey("shoal_caller", Caller)  # set by the middleware on /v1/* and /metrics


@dataclass
class Access:
    enabled: bool = True
    ttl_s: float = 15.0
    size: int = 10_000
    kube: Kube | None = None
    tokens: TtlCache = field(init=False)
    reviews: TtlCache = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = TtlCache(ttl_s=self.ttl_s, size=self.size)
        self.reviews = TtlCache(ttl_s=self.ttl_s, size=self.size)

    async def check_reviewer(self) -> None:
        """NotReached (the one line the service prints, exit 3) unless the api's own credentials may create
        TokenReviews and SubjectAccessReviews."""
        assert self.kube is not None
        missing = []
        for resource in (TOKEN_REVIEWS, SUBJECT_ACCESS_REVIEWS):
            attrs = {"verb": "create", "group": resource.group, "resource": resource.plural}
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": attrs}}
            try:
                answer = await self.kube.create(SELF_SUBJECT_ACCESS_REVIEWS, body, idempotent=True)
            except ShoalError as exc:
                raise NotReached(f"SHOAL_API_AUTH=kubernetes: asking the Kubernetes API failed: {exc}") from None
            if not ((answer or {}).get("status") or {}).get("allowed"):
                missing.append(f"{resource.plural}.{resource.group}")
        if missing:
            raise NotReached(f"SHOAL_API_AUTH=kubernetes: the api's Kubernetes credentials may not create "
                             f"{' or '.join(missing)} (bind the ClusterRole system:auth-delegator to its account; "
                             "SHOAL_API_AUTH=none turns authorisation off)")

    async def authenticate(self, request: web.Request) -> Caller:
        """The caller of `request`; 401 without a token the apiserver accepts, 503 when it does not answer."""
        token = _token(request.headers)
        if not token:
            raise _json_error(web.HTTPUnauthorized, "no bearer token: send `Authorization: Bearer <token>` with a "
                              "Kubernetes token (e.g. `kubectl create token <serviceaccount>`); docs/api.md")
        key = hashlib.sha256(token.encode()).hexdigest()
        answer = await self._ask(self.tokens, key, lambda: self._token_review(token), "TokenReview")
        if isinstance(answer, str):
            raise _json_error(web.HTTPUnauthorized, f"the Kubernetes API did not accept the token: {answer}")
        return answer

    async def allowed(self, caller: Caller, permission: Permission) -> bool:
        return await self._ask(self.reviews, (caller, permission), lambda: self._review(caller, permission),
                               "SubjectAccessReview")

    async def allowed_all(self, caller: Caller, permissions: Iterable[Permission]) -> bool:
        for permission in permissions:
            if not await self.allowed(caller, permission):
                return False
        return True

    async def require(self, caller: Caller, permissions: Iterable[Permission]) -> None:
        """403 naming the first permission `caller` lacks."""
        for permission in permissions:
            if not await self.allowed(caller, permission):
                raise _json_error(
                    web.HTTPForbidden, f"{caller.username} may not {permission.text()}: bind the ClusterRole "
                    f"{permission.role} (docs/api.md, Access)", missing=permission.json())

    async def scope(self, request: web.Request, namespace: str = "") -> Scope:
        """What the caller of `request` may read; 403 when `namespace` (a filter they asked for) is not in it."""
        caller = request.get(CALLER) if self.enabled else None
        if not self.enabled or caller is None:
            return Scope(self, None, everything=not self.enabled)
        scope = Scope(self, caller, everything=await self.allowed(caller, CLUSTER))
        if namespace and not scope.everything:
            await self.require(caller, namespace_permissions(namespace))
        return scope

    @web.middleware
    async def middleware(self, request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        path = request.path
        if not self.enabled or not (path == "/metrics" or path.startswith("/v1/")):
            return await handler(request)
        caller = await self.authenticate(request)
        request[CALLER] = caller
        route = request.match_info.route.resource
        canonical = route.canonical if route is not None else path
        if path == "/metrics":
            await self.require(caller, [METRICS])
        elif canonical in CLUSTER_ROUTES:
            await self.require(caller, [CLUSTER])
        elif "namespace" in request.match_info:
            await self.require(caller, namespace_permissions(request.match_info["namespace"]))
        return await handler(request)

    async def _ask(self, cache: TtlCache, key: Any, work: Callable[[], Awaitable[Any]], what: str) -> Any:
        if self.kube is None:
            raise _json_error(web.HTTPServiceUnavailable, "authorisation unavailable: no Kubernetes connection yet")
        try:
            return await cache.get(key, work)
        except ShoalError as exc:
            log.warning("access_review_failed", review=what, error=str(exc))
            raise _json_error(web.HTTPServiceUnavailable,
                              f"authorisation unavailable: the Kubernetes API did not answer the {what}: {exc}",
                              ) from None

    async def _token_review(self, token: str) -> Caller | str:
        assert self.kube is not None
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        status = (await self.kube.create(TOKEN_REVIEWS, body) or {}).get("status") or {}
        if not status.get("authenticated"):
            return str(status.get("error") or "not authenticated")
        user = status.get("user") or {}
        extra = tuple(sorted((str(k), tuple(v or ())) for k, v in (user.get("extra") or {}).items()))
        return Caller(str(user.get("username", "")), str(user.get("uid", "")), tuple(user.get("groups") or ()),
                      extra)

    async def _review(self, caller: Caller, permission: Permission) -> bool:
        assert self.kube is not None
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {**caller.spec(), **permission.attributes()}}
        status = (await self.kube.create(SUBJECT_ACCESS_REVIEWS, body) or {}).get("status") or {}
        return bool(status.get("allowed")) and not status.get("denied")


def _token(headers: Mapping[str, str]) -> str:
    for name in TOKEN_HEADERS:
        scheme, _, value = (headers.get(name) or "").strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    return ""


def namespace_of_subject(subject: Any) -> str:
    """`team-a/train-0` → `team-a`; a subject with no namespace → "" (only a cluster reader sees it)."""
    namespace, slash, _ = str(subject or "").partition("/")
    return namespace if slash else ""


def event_namespace(event: Mapping[str, Any]) -> str:
    return namespace_of_subject(event.get("subject"))

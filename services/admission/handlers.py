"""AdmissionReview in, AdmissionReview out: pods (validate, mutate), queues and PodGroups (validate).

Bad input never raises: a body that is not an AdmissionReview is answered with a denial that says what
is wrong (HTTP 200, so the apiserver shows the message), and a cluster read that fails degrades to the
safe answer (no runtimeClassName injected, with a warning; queue checks against what could be read).
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from services.admission import podgroups, sharing
from services.admission import translate as t
from shoal.adapters import kube as k
from shoal.core.fields import text
from shoal.errors import NotFoundError, ShoalError
from shoal.logging import get_logger
from shoal.metrics import Metrics

_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # lowercase, no vowels (no words), as Kubernetes' generated names


def random_suffix(length: int = 7) -> str:
    """The random part of a fraction pod's ConfigMap prefix."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


log = get_logger("services.admission")

# the apiserver sends at most its request limit (3 MB) twice (object and oldObject) plus the review around them
MAX_REVIEW_BYTES = 16 * 2**20
MAX_MESSAGE = 2048  # a denial quoting hostile values stays readable
RuntimeClassExists = Callable[[str], Awaitable[bool | None]]  # None: could not tell
ListQueues = Callable[[], Awaitable[list[dict]]]
PodWarning = Callable[[str, str, str, str], Awaitable[None]]  # (namespace, name, generateName, message)


def review_response(uid: str, *, allowed: bool, message: str = "", warnings: list[str] | None = None,
                    patch: list[dict] | None = None, code: int = 403) -> dict:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        message = message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE] + "..."
        response["status"] = {"code": code, "message": message, "reason": "Forbidden" if code == 403 else "BadRequest"}
    if warnings:
        response["warnings"] = [w[:512] for w in warnings]
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def parse_review(body: bytes) -> tuple[dict | None, str, str]:
    """(request, uid, problem): the AdmissionReview's request, or a problem to deny with."""
    try:
        doc = json.loads(body)
    except json.JSONDecodeError as exc:
        return None, "", f"malformed AdmissionReview: not JSON ({exc})"
    except UnicodeDecodeError as exc:
        return None, "", f"malformed AdmissionReview: not UTF-8 ({exc})"
    except ValueError:  # Python's cap on the digits of an integer (4300)
        return None, "", "malformed AdmissionReview: a number with more than 4300 digits"
    except RecursionError:
        return None, "", "malformed AdmissionReview: nested too deeply to read"
    if not isinstance(doc, dict) or not isinstance(doc.get("request"), dict):
        return None, "", "malformed AdmissionReview: no request object"
    request = doc["request"]
    uid = str(request.get("uid") or "")
    if not uid:
        return None, "", "malformed AdmissionReview: request.uid missing"
    return request, uid, ""


@dataclass
class Admission:
    metrics: Metrics
    runtime_class_exists: RuntimeClassExists
    list_queues: ListQueues
    gpu_sharing: bool = True
    gpu_sharing_mode: str = "NonMemoryEnforced"
    pool_modes: dict[str, str] = field(default_factory=dict)
    runtime_class: str = "nvidia"
    scheduler_names: tuple[str, ...] = ("shoal-scheduler",)
    pod_warning: PodWarning | None = None
    _reviews: Any = field(init=False)
    _tasks: set = field(default_factory=set)

    def __post_init__(self) -> None:
        self._reviews = self.metrics.counter("admission_reviews_total", "Admission reviews by hook and outcome.",
                                             ["hook", "outcome"])

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/validate-pods", self._endpoint("validate-pods", self.validate_pod))
        app.router.add_post("/mutate-pods", self._endpoint("mutate-pods", self.mutate_pod))
        app.router.add_post("/validate-queues", self._endpoint("validate-queues", self.validate_queue))
        app.router.add_post("/validate-podgroups", self._endpoint("validate-podgroups", self.validate_podgroup))

    def _endpoint(self, hook: str, handle: Callable[[dict, str], Awaitable[dict]]
                  ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def endpoint(request: web.Request) -> web.Response:
            started = time.monotonic()
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                log.warning("admission_review_too_large", hook=hook, limit_bytes=request.client_max_size)
                return web.json_response(review_response(
                    "", allowed=False, code=413, message=f"malformed AdmissionReview: body larger than "
                                                         f"{request.client_max_size} bytes"), status=413)
            review, uid, problem = parse_review(body)
            if review is None:
                answer = review_response(uid, allowed=False, message=problem, code=400)
            else:
                try:
                    answer = await handle(review, uid)
                except Exception as exc:  # never a 500 for one odd object: deny with the reason
                    log.exception("admission_handler_failed", hook=hook, uid=uid)
                    answer = review_response(uid, allowed=False, code=400,
                                             message=f"shoal admission could not process the object: "
                                                     f"{type(exc).__name__}: {exc}")
            response = answer["response"]
            outcome = "denied" if not response["allowed"] else ("warned" if response.get("warnings") else "allowed")
            self._reviews.labels(hook=hook, outcome=outcome).inc()
            log.info("admission_review", hook=hook, uid=uid, outcome=outcome,
                     message=(response.get("status") or {}).get("message") or "",
                     warnings=response.get("warnings", []), ms=round((time.monotonic() - started) * 1000, 1))
            return web.json_response(answer)

        return endpoint

    def _mode(self, pod: Mapping) -> str:
        return sharing.pod_mode(pod, self.gpu_sharing_mode, self.pool_modes, self.gpu_sharing)

    def _ours(self, pod: Mapping) -> bool:
        spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
        return str(spec.get("schedulerName") or "") in self.scheduler_names

    @staticmethod
    def _object(review: dict, key: str = "object") -> dict:
        obj = review.get(key)
        return obj if isinstance(obj, dict) else {}

    async def validate_pod(self, review: dict, uid: str) -> dict:
        pod = self._object(review)
        if not self._ours(pod):
            return review_response(uid, allowed=True)
        name = t.pod_display_name(pod, str(review.get("namespace") or ""), str(review.get("name") or ""))
        denial = t.validate_pod(pod, gpu_sharing=self.gpu_sharing, display_name=name, mode=self._mode(pod))
        return review_response(uid, allowed=denial is None, message=denial or "")

    async def mutate_pod(self, review: dict, uid: str) -> dict:
        pod = self._object(review)
        if not self._ours(pod) or not t.is_sharing_request(pod):
            return review_response(uid, allowed=True)
        exists = await self.runtime_class_exists(self.runtime_class) if self.runtime_class else False
        mutation = t.mutate_pod(pod, runtime_class=self.runtime_class, runtime_class_exists=bool(exists),
                                gpu_sharing=self.gpu_sharing, random7=random_suffix(), mode=self._mode(pod))
        warnings = list(mutation.warnings)
        if exists is None and warnings:
            warnings = [f"could not read RuntimeClass {self.runtime_class!r}: runtimeClassName not injected"]
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
        name = str(meta.get("name") or review.get("name") or "")
        generate_name = str(meta.get("generateName") or "")
        if warnings and self.pod_warning is not None and (name or generate_name) and not review.get("dryRun"):
            # also as an event on the pod (SPEC §2.8): controllers creating pods do not show admission warnings
            namespace = str(meta.get("namespace") or review.get("namespace") or "default")
            task = asyncio.create_task(self.pod_warning(namespace, name, generate_name, warnings[0]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return review_response(uid, allowed=True, warnings=warnings, patch=mutation.patch)

    async def validate_queue(self, review: dict, uid: str) -> dict:
        operation = str(review.get("operation") or "CREATE")
        queue, old = self._object(review), self._object(review, "oldObject") or None
        try:
            queues = await self.list_queues()
        except ShoalError as exc:
            log.warning("admission_queue_list_failed", error=str(exc))
            queues = []
            if operation == "DELETE":
                return review_response(uid, allowed=True, warnings=[f"could not check child queues: {exc}"])
        verdict = t.validate_queue(operation, queue, old, queues)
        return review_response(uid, allowed=verdict.denial is None, message=verdict.denial or "",
                               warnings=verdict.warnings)


    async def validate_podgroup(self, review: dict, uid: str) -> dict:
        if str(review.get("operation") or "") != "UPDATE":
            return review_response(uid, allowed=True)
        denial = podgroups.validate_update(self._object(review, "oldObject"), self._object(review))
        return review_response(uid, allowed=denial is None, message=denial or "")


class RuntimeClassLookup:
    """Does a RuntimeClass exist? Answers are cached for a few seconds; None when the API cannot say."""

    def __init__(self, kube: k.Kube, ttl_s: float = 5.0) -> None:
        self.kube = kube
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, bool]] = {}

    async def __call__(self, name: str) -> bool | None:
        now = time.monotonic()
        cached = self._cache.get(name)
        if cached and now - cached[0] < self.ttl_s:
            return cached[1]
        try:
            await self.kube.get(k.RUNTIME_CLASSES, name)
            exists = True
        except NotFoundError:
            exists = False
        except ShoalError as exc:
            log.warning("admission_runtimeclass_lookup_failed", runtime_class=name, error=str(exc))
            return None
        self._cache[name] = (now, exists)
        return exists


RUNTIME_CLASS_REASON = "RuntimeClassNotInjected"
CORE_EVENTS = k.Resource("", "v1", "events", "Event")


class PodEvents:
    """Best-effort Warning events on pods that are being created. Admission answers before the pod is stored
    and, for `generateName` pods (every controller's), before it has a name: wait for it to appear, then post
    a core/v1 Event with its uid. Pods of one generateName are taken oldest first, each once (the messages of
    concurrent reviews are the same, so which review "owns" which pod does not matter)."""

    def __init__(self, kube: k.Kube, *, attempts: int = 20, interval_s: float = 0.5) -> None:
        self.kube = kube
        self.attempts = attempts
        self.interval_s = interval_s
        self._warned: dict[str, float] = {}  # pod uid → when
        self.disabled = False

    async def _find(self, namespace: str, name: str, generate_name: str) -> dict | None:
        if name:
            try:
                return await self.kube.get(k.PODS, name, namespace=namespace)
            except NotFoundError:
                return None
        items, _ = await self.kube.list(k.PODS, namespace=namespace)
        candidates = sorted(
            (p for p in items if (p.get("metadata") or {}).get("generateName") == generate_name
             and t.is_sharing_request(p) and not (p.get("spec") or {}).get("runtimeClassName")
             and (p.get("metadata") or {}).get("uid") not in self._warned),
            key=lambda p: (str(p["metadata"].get("creationTimestamp") or ""), str(p["metadata"].get("name"))))
        return candidates[0] if candidates else None

    async def __call__(self, namespace: str, name: str, generate_name: str, message: str) -> None:
        if self.disabled:
            return
        try:
            for _ in range(self.attempts):
                pod = await self._find(namespace, name, generate_name)
                uid = text(pod, "metadata", "uid")
                if pod is not None and uid not in self._warned:
                    break
                await asyncio.sleep(self.interval_s)
            else:
                return
            now = time.monotonic()
            self._warned[uid] = now
            if len(self._warned) > 10_000:
                self._warned = {u: at for u, at in self._warned.items() if now - at < 600}
            if not name:
                message = message.replace(f"{namespace}/{generate_name}", f"{namespace}/{pod['metadata']['name']}")
            await self.kube.create(CORE_EVENTS, t.pod_event(pod, RUNTIME_CLASS_REASON, message),
                                   namespace=namespace)
        except ShoalError as exc:
            if getattr(exc, "status", None) == 403:  # least-privilege RBAC without pods/events: stop trying
                self.disabled = True
                log.warning("admission_pod_events_disabled", error=str(exc),
                            hint="grant get/list pods and create events, or set SHOAL_POD_EVENTS=false")
                return
            log.warning("admission_pod_event_failed", pod=f"{namespace}/{name or generate_name}", error=str(exc))

"""The admission endpoints over HTTP (aiohttp test server): review in, review out, never a 500."""

from __future__ import annotations

import base64
import json

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from services.admission.handlers import Admission, parse_review, review_response
from services.admission.registration import configurations, instance_name, match_labels
from shoal.errors import TransientError
from shoal.metrics import Metrics


def review(obj, operation="CREATE", old=None, uid="u-1"):
    request = {"uid": uid, "operation": operation, "object": obj, "namespace": "ns", "name": ""}
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def fraction_pod(value="0.5", scheduler="shoal-scheduler"):
    return {"metadata": {"name": "p", "namespace": "ns", "annotations": {"gpu-fraction": value}},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "c"}]}}


async def client(*, exists=True, queues=None, failing_queues=False, sharing=True) -> TestClient:
    async def runtime_class_exists(name):
        return exists

    async def list_queues():
        if failing_queues:
            raise TransientError("apiserver away")
        return queues or []

    app = web.Application()
    Admission(metrics=Metrics(), runtime_class_exists=runtime_class_exists, list_queues=list_queues,
              gpu_sharing=sharing).routes(app)
    test_client = TestClient(TestServer(app))
    await test_client.start_server()
    return test_client


async def post(c: TestClient, path: str, body) -> dict:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = await c.post(path, data=data)
    assert response.status == 200
    return (await response.json())["response"]


async def test_pod_validation_denies_with_kai_message_and_ignores_other_schedulers():
    c = await client()
    try:
        denied = await post(c, "/validate-pods", review(fraction_pod("1.5")))
        assert denied == {"uid": "u-1", "allowed": False, "status": {
            "code": 403, "reason": "Forbidden",
            "message": "gpu-fraction annotation value must be a positive number smaller than 1.0"}}
        assert (await post(c, "/validate-pods", review(fraction_pod("1.5", "default-scheduler"))))["allowed"]
        assert (await post(c, "/validate-pods", review(fraction_pod("0.5"))))["allowed"]
    finally:
        await c.close()


async def test_sharing_disabled_names_the_pod():
    c = await client(sharing=False)
    try:
        denied = await post(c, "/validate-pods", review(fraction_pod()))
        assert denied["status"]["message"] == (
            "attempting to create a pod ns/p with gpu sharing request, while GPU sharing is disabled")
    finally:
        await c.close()


async def test_mutation_patch_and_warning():
    c = await client(exists=True)
    try:
        answer = await post(c, "/mutate-pods", review(fraction_pod()))
        assert answer["allowed"] and answer["patchType"] == "JSONPatch"
        patch = json.loads(base64.b64decode(answer["patch"]))
        assert patch[-1] == {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"}
        assert {op["path"] for op in patch[:-1]} == {
            "/metadata/annotations/runai~1shared-gpu-configmap", "/spec/containers/0/env", "/spec/containers/0/envFrom"}
    finally:
        await c.close()
    c = await client(exists=False)
    try:
        answer = await post(c, "/mutate-pods", review(fraction_pod()))
        patch = json.loads(base64.b64decode(answer["patch"]))
        assert answer["allowed"] and all(op["path"] != "/spec/runtimeClassName" for op in patch)
        assert "RuntimeClass 'nvidia' does not exist" in answer["warnings"][0]
    finally:
        await c.close()


async def test_queue_review_and_unreachable_apiserver():
    q = {"metadata": {"name": "q"}, "spec": {"resources": {"gpu": {"quota": 1}}}}
    c = await client(failing_queues=True)
    try:
        answer = await post(c, "/validate-queues", review(q))
        assert answer["allowed"]
        assert "resources.gpu: limit omitted: Shoal reads it as limit = quota (1)" in answer["warnings"]
        assert (await post(c, "/validate-queues", review({}, "DELETE", q)))["allowed"]
    finally:
        await c.close()


async def test_malformed_bodies_are_denied_clearly():
    c = await client()
    try:
        for body, message in [(b"{oops", "malformed AdmissionReview: not JSON"),
                              ({"kind": "AdmissionReview"}, "malformed AdmissionReview: no request object"),
                              ({"request": {"object": {}}}, "malformed AdmissionReview: request.uid missing")]:
            answer = await post(c, "/validate-pods", body)
            assert answer["allowed"] is False and answer["status"]["message"].startswith(message)
            assert answer["status"]["code"] == 400
        junk = await post(c, "/validate-queues", review("not an object"))
        assert junk["allowed"] is False and junk["status"]["message"] == "spec must be specified"
        odd = await post(c, "/validate-pods", review({"spec": {"schedulerName": "shoal-scheduler",
                                                                "containers": "x"},
                                                       "metadata": {"annotations": {"gpu-fraction": "0.5"}}}))
        assert odd["allowed"] is True
    finally:
        await c.close()


def test_parse_and_response_helpers():
    assert parse_review(b"[]")[2] == "malformed AdmissionReview: no request object"
    out = review_response("x", allowed=True, warnings=["w" * 600])
    assert len(out["response"]["warnings"][0]) == 512


def test_registration_scopes_and_policies():
    mutating, validating = configurations("n", "https://127.0.0.1:9443", b"CA", namespace_selector="a=b",
                                          queue_selector="t=1", scheduler_names=("shoal-scheduler", "kai-scheduler"))
    hook = mutating["webhooks"][0]
    assert hook["failurePolicy"] == "Ignore" and hook["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate-pods"
    assert hook["namespaceSelector"]["matchLabels"] == {"a": "b"}
    assert "'kai-scheduler'" in hook["matchConditions"][0]["expression"]
    pods, queues, podgroups = validating["webhooks"]
    assert pods["failurePolicy"] == "Fail" and queues["failurePolicy"] == "Fail"
    assert podgroups["failurePolicy"] == "Fail" and podgroups["rules"][0]["operations"] == ["UPDATE"]
    assert podgroups["clientConfig"]["url"] == "https://127.0.0.1:9443/validate-podgroups"
    assert queues["objectSelector"] == {"matchLabels": {"t": "1"}}
    assert base64.b64decode(pods["clientConfig"]["caBundle"]) == b"CA"
    assert match_labels("a=b, c = d,junk") == {"a": "b", "c": "d"}
    skipped = hook["namespaceSelector"]["matchExpressions"][0]
    assert skipped["operator"] == "NotIn" and "kai-resource-reservation" in skipped["values"]


def test_registration_leaves_the_configured_reservation_namespace_alone():
    mutating, validating = configurations("n", "https://127.0.0.1:9443", b"CA", reservation_namespace="gpu-reserve")
    for hook in (mutating["webhooks"][0], validating["webhooks"][0], validating["webhooks"][2]):
        values = hook["namespaceSelector"]["matchExpressions"][0]["values"]
        assert "gpu-reserve" in values and "kai-resource-reservation" not in values


def test_instance_name_per_topic_prefix():
    assert instance_name("shoal-admission", "") == "shoal-admission"
    assert instance_name("shoal-admission", "e1a2b3c4.") == "shoal-admission-e1a2b3c4"
    assert instance_name("shoal-admission", "Weird_Prefix.") == "shoal-admission-weird-prefix"


def test_settings_from_env():
    import pytest

    from services.admission.app import AdmissionSettings
    from shoal.errors import ConfigError
    from shoal.settings import load_settings

    s = load_settings(AdmissionSettings, {"SHOAL_SCHEDULER_NAME": "kai-scheduler", "SHOAL_WEBHOOK_PORT": "0",
                                          "SHOAL_GPU_SHARING": "false", "SHOAL_RUNTIME_CLASS": "none"})
    assert s.scheduler_names == ("kai-scheduler",) and s.webhook.port == 0
    assert s.gpu_sharing is False and s.injected_runtime_class == ""
    assert load_settings(AdmissionSettings, {}).injected_runtime_class == "nvidia"
    assert AdmissionSettings(runtime_class="").injected_runtime_class == ""
    with pytest.raises(ConfigError) as info:
        load_settings(AdmissionSettings, {"SHOAL_WEBHOOK_TLS_CERT_FILE": "/x", "SHOAL_WEBHOOK_TIMEOUT_S": "99"})
    assert len(info.value.problems) == 2


class _Pods:
    """Just enough of Kube for PodEvents: pods appear after `delay` reads."""

    def __init__(self, pods, delay=1):
        self.pods, self.delay, self.events = pods, delay, []

    async def get(self, resource, name, *, namespace=None):
        from shoal.errors import NotFoundError

        self.delay -= 1
        found = [p for p in self.pods if p["metadata"]["name"] == name]
        if self.delay >= 0 or not found:
            raise NotFoundError("not yet", status=404)
        return found[0]

    async def list(self, resource, *, namespace=None):
        self.delay -= 1
        return ([] if self.delay >= 0 else list(self.pods)), "1"

    async def create(self, resource, body, *, namespace=None):
        self.events.append(body)


def _stored(name, uid, generate_name="", created="2026-01-01T00:00:00Z"):
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "generateName": generate_name,
                         "creationTimestamp": created, "annotations": {"gpu-fraction": "0.5"}},
            "spec": {"schedulerName": "shoal-scheduler"}}


async def test_pod_events_for_named_and_generated_pods():
    from services.admission.handlers import PodEvents

    kube = _Pods([_stored("half", "u0")])
    await PodEvents(kube, interval_s=0)("ns", "half", "", "RuntimeClass 'nvidia' does not exist … pod ns/half")
    [event] = kube.events
    assert event["reason"] == "RuntimeClassNotInjected" and event["involvedObject"]["uid"] == "u0"

    kube = _Pods([_stored("job-b", "u2", "job-", "2026-01-01T00:00:02Z"), _stored("job-a", "u1", "job-")])
    events = PodEvents(kube, interval_s=0)
    for _ in range(2):
        await events("ns", "", "job-", "RuntimeClass 'nvidia' does not exist … pod ns/job-")
    assert [e["involvedObject"]["uid"] for e in kube.events] == ["u1", "u2"]
    assert kube.events[0]["message"].endswith("pod ns/job-a")
    await events("ns", "", "job-", "again")  # nothing left to warn about: gives up quietly
    assert len(kube.events) == 2


async def test_pod_events_stop_after_forbidden():
    from services.admission.handlers import PodEvents
    from shoal.errors import PermanentError

    class Forbidden(_Pods):
        async def get(self, resource, name, *, namespace=None):
            self.calls = getattr(self, "calls", 0) + 1
            raise PermanentError("pods is forbidden", status=403)

    kube = Forbidden([])
    events = PodEvents(kube, interval_s=0)
    await events("ns", "p", "", "m")
    await events("ns", "q", "", "m")
    assert events.disabled and kube.calls == 1 and kube.events == []

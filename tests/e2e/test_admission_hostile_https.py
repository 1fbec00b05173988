"""The admission service's real HTTPS server (its own process, on the real apiserver, self-signed CA) fed
random, truncated, wrongly typed and huge AdmissionReview bodies, and hostile pods, queues and PodGroups inside
valid reviews: every request is answered in bounded time (an AdmissionReview that allows, or denies with a
message saying what is wrong; 413 with such a denial for a body over the limit), never a 5xx, never a
traceback in the log, and the server keeps serving.

Not registered with the apiserver (nothing else is affected): the test posts to the webhook port itself.
Budget: `SHOAL_FUZZ_EXAMPLES` (tests/hostile_values.py).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import service_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile_values import EXAMPLES, EXTREME, mutated, nested

HOOKS = ("/validate-pods", "/mutate-pods", "/validate-queues", "/validate-podgroups")
CATCH_ALL = "shoal admission could not process the object"  # the handlers' last resort: never reached
REQUEST_TIMEOUT_S = 10.0  # per request, the huge bodies included


@dataclass
class Webhook:
    port: int
    context: ssl.SSLContext
    state: Path
    pid: int

    def log(self) -> str:
        path = self.state / "logs" / "shoal-admission.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def post(self, path: str, body: bytes) -> tuple[int, dict]:
        """POST over HTTPS; (status, JSON body). Fails the test for a body that is not JSON or a slow answer."""
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context,
                                                 timeout=REQUEST_TIMEOUT_S)
        started = time.monotonic()
        try:
            connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        assert time.monotonic() - started < REQUEST_TIMEOUT_S
        return response.status, json.loads(data)


@pytest.fixture(scope="module")
def webhook(stack: Any) -> Iterator[Webhook]:
    from shoal.devstack.procs import free_port
    from shoal.devstack.scheduler import install_base, service_spec

    asyncio.run(install_base(stack.kubeconfig))  # the Queue CRD the queue hook lists
    state = Path(tempfile.mkdtemp(prefix="shoal-admission-hostile-"))
    port = free_port()
    env = {**stack.env(), "SHOAL_WEBHOOK_PORT": str(port), "SHOAL_WEBHOOK_REGISTER": "false",
           "SHOAL_WEBHOOK_CERT_DIR": str(state / "tls"), "SHOAL_POD_EVENTS": "false",
           "SHOAL_RUNTIME_CLASS": f"shoal-rc-{uuid.uuid4().hex[:8]}", "SHOAL_TOPIC_PREFIX": ""}
    spec = service_spec("admission", env)
    spec.env.update(SHOAL_WEBHOOK_PORT=str(port), SHOAL_WEBHOOK_REGISTER="false")  # the stack's default registers
    with service_process(state, spec) as pid:
        context = ssl.create_default_context(cafile=str(state / "tls" / "ca.crt"))
        yield Webhook(port=port, context=context, state=state, pid=pid)


def check_answer(status: int, answer: dict, uid: str | None = None) -> dict:
    """An AdmissionReview: allowed, or denied with a message saying what is wrong (never the catch-all)."""
    assert status in (200, 413), (status, answer)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert isinstance(response["allowed"], bool)
    if uid is not None:
        assert response["uid"] == uid
    if not response["allowed"]:
        message = response["status"]["message"]
        assert message and CATCH_ALL not in message, message
        assert len(message) <= 2048 + 3, message  # a denial quoting hostile values is cut short
    if status == 413:
        assert response["status"]["message"].startswith("malformed AdmissionReview: body larger than")
    return response


def review(obj: object, operation: str = "UPDATE", old: object = None, uid: str = "u-1") -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": uid, "operation": operation, "namespace": "ns", "name": "p",
                                   "object": obj, "oldObject": old}}).encode()


POD = {"metadata": {"name": "p", "namespace": "ns", "annotations": {"gpu-fraction": "0.5"},
                    "labels": {"kai.scheduler/node-pool": "pool-a"}},
       "spec": {"schedulerName": "shoal-scheduler",
                "containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}}
QUEUE = {"metadata": {"name": "q-hostile"},
         "spec": {"parentQueue": "", "resources": {"gpu": {"quota": 4, "limit": 8, "overQuotaWeight": 1},
                                                   "cpu": {"quota": -1, "limit": -1}, "memory": {"quota": -1}}}}
PODGROUP = {"metadata": {"name": "pg", "annotations": {"kai.scheduler/last-start-timestamp": "2026-01-01T00:00:00Z"}},
            "spec": {"preemptibility": "semi-preemptible", "minMember": 2,
                     "subGroups": [{"name": "a", "minMember": 1}]}}
OBJECTS = {"/validate-pods": POD, "/mutate-pods": POD, "/validate-queues": QUEUE, "/validate-podgroups": PODGROUP}

BODIES = {
    "empty": b"", "not_json": b"{not json", "binary": bytes(range(256)), "truncated": review(POD)[:40],
    "array": b"[1, 2]", "deep": b"[" * 100_000, "deep_request": b'{"request":' * 50_000,
    "no_uid": b'{"request": {"object": {}}}', "uid_object": b'{"request": {"uid": {"a": 1}}}',
    "uid_surrogate": b'{"request": {"uid": "\\ud800", "object": {}}}', "huge_number": b"9" * 5000,
    "huge_valid": review({**POD, "metadata": {**POD["metadata"], "annotations": {"x": "y" * (4 * 2**20)}}}),
    "deep_object": review({"spec": nested(900)}),
    "quota_1e400": review(QUEUE).replace(b'"quota": 4', b'"quota": 1e400'),
    "limit_nan": review(QUEUE).replace(b'"limit": 8', b'"limit": NaN'),
    "fraction_negative": review(POD).replace(b'"0.5"', b'"-0.5"'),
}


def test_hostile_bodies_are_answered_and_the_server_keeps_serving(webhook: Webhook) -> None:
    for path in HOOKS:
        for name, body in BODIES.items():
            status, answer = webhook.post(path, body)
            assert status == 200, name  # under the limit
            check_answer(status, answer)
        status, answer = webhook.post(path, b" " * (17 * 2**20))  # over the 16 MiB limit
        assert status == 413
        check_answer(status, answer)
        check_answer(*webhook.post(path, review(OBJECTS[path], uid="after")), uid="after")
    log = webhook.log()
    assert "Traceback" not in log and "admission_handler_failed" not in log
    assert "admission_review_too_large" in log


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])
@given(data=st.data(), path=st.sampled_from(HOOKS), operation=st.sampled_from(["CREATE", "UPDATE", "DELETE"]))
def test_hostile_objects_in_valid_reviews_are_answered(webhook: Webhook, data: st.DataObject, path: str,
                                                       operation: str) -> None:
    obj = data.draw(mutated(OBJECTS[path], EXTREME))
    old = data.draw(st.one_of(st.none(), mutated(OBJECTS[path], EXTREME)))
    uid = uuid.uuid4().hex
    check_answer(*webhook.post(path, review(obj, operation, old, uid=uid)), uid=uid)


def test_after_the_search_the_server_still_serves_and_logged_no_traceback(webhook: Webhook) -> None:
    for path in HOOKS:
        check_answer(*webhook.post(path, review(OBJECTS[path], uid="last")), uid="last")
    log = webhook.log()
    assert "Traceback" not in log and "admission_handler_failed" not in log
    assert "Error handling request" not in log  # aiohttp's line for a 500

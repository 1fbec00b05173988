"""The admission service as its own process, registered on the real apiserver (HTTPS, self-signed CA): pod
fraction denials with KAI's messages (S31), runtimeClassName injection only when the RuntimeClass exists
(SPEC §2.8), queue denials and warnings (SPEC §2.1), a malformed review answered with a clear denial.

The webhooks are narrowed to this module's namespaces and queues (label selectors), so other tests sharing
the stack are not affected.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from e2e_helpers import eventually, service_process

from shoal.adapters.kube import JOBS, NAMESPACES, PODS, QUEUES, RUNTIME_CLASSES, Kube, Resource
from shoal.errors import NotFoundError, PermanentError

TEST_LABEL = "shoal.io/admission-test"
CORE_EVENTS = Resource("", "v1", "events", "Event")
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


class Admission:
    def __init__(self, run_id: str, state: Path, runtime_class: str) -> None:
        self.run_id = run_id
        self.state = state
        self.runtime_class = runtime_class
        self.config_name = f"shoal-admission-{run_id}"

    def log(self) -> str:
        path = self.state / "logs" / "shoal-admission.log"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(scope="module")
def admission(stack: Any) -> Iterator[Admission]:
    from shoal.devstack.scheduler import install_base, service_spec

    asyncio.run(install_base(stack.kubeconfig))  # the Queue CRD
    run_id = uuid.uuid4().hex[:8]
    state = Path(tempfile.mkdtemp(prefix="shoal-admission-"))
    svc = Admission(run_id, state, runtime_class=f"shoal-rc-{run_id}")
    env = {**stack.env(), "SHOAL_WEBHOOK_PORT": "0", "SHOAL_WEBHOOK_REGISTER": "true",
           "SHOAL_WEBHOOK_CONFIG_NAME": svc.config_name, "SHOAL_WEBHOOK_CERT_DIR": str(state / "tls"),
           "SHOAL_WEBHOOK_NAMESPACE_SELECTOR": f"{TEST_LABEL}={run_id}",
           "SHOAL_WEBHOOK_QUEUE_SELECTOR": f"{TEST_LABEL}={run_id}",
           "SHOAL_RUNTIME_CLASS": svc.runtime_class, "SHOAL_TOPIC_PREFIX": ""}
    spec = service_spec("admission", env)
    with service_process(state, spec):
        yield svc


@pytest.fixture
async def ns(kube: Kube, namespace: str, admission: Admission) -> str:
    """The test namespace, labelled so the module's webhooks see its pods."""
    await kube.patch(NAMESPACES, namespace, {"metadata": {"labels": {TEST_LABEL: admission.run_id}}})
    return namespace


def pod(name: str, annotations: dict | None = None, limits: dict | None = None) -> dict:
    container: dict = {"name": "main", "image": "busybox"}
    if limits:
        container["resources"] = {"limits": limits}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"schedulerName": "shoal-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [container]}}


async def create(kube: Kube, path: str, body: dict) -> tuple[dict, list[str]]:
    """POST and return (object, admission warnings from the Warning headers)."""
    response = await kube.open("POST", path, body=body)
    try:
        warnings = response.headers.getall("Warning", [])
        return json.loads(await response.read()), warnings
    finally:
        response.release()


async def denial(kube: Kube, path: str, body: dict) -> str:
    with pytest.raises(PermanentError) as info:
        await create(kube, path, body)
    return str(info.value)


async def wait_active(kube: Kube, ns: str) -> None:
    """The apiserver picks up new webhook configurations asynchronously: wait until a bad pod is denied."""
    async def denied() -> bool:
        try:
            await create(kube, PODS.path(ns), pod(f"probe-{uuid.uuid4().hex[:6]}", {"gpu-fraction": "7"}))
        except PermanentError:
            return True
        return False

    await eventually(denied, timeout_s=20, what="the validating webhook to be active")


S31 = [
    ({"gpu-fraction": "1"}, None, "gpu-fraction annotation value must be a positive number smaller than 1.0"),
    ({"gpu-fraction": "0"}, None, "gpu-fraction annotation value must be a positive number smaller than 1.0"),
    ({"gpu-fraction": "abc"}, None, "gpu-fraction annotation value must be a positive number smaller than 1.0"),
    ({"gpu-fraction": "1.5"}, None, "gpu-fraction annotation value must be a positive number smaller than 1.0"),
    ({"gpu-fraction": "-1"}, None, "gpu-fraction annotation value must be a positive number smaller than 1.0"),
    ({"gpu-fraction": "0.5"}, {"nvidia.com/gpu": "1"},
     "cannot have both GPU fraction request and whole GPU resource request/limit"),
    ({"gpu-memory": "0"}, None, "gpu-memory annotation value must be a positive integer greater than 0"),
    ({"gpu-fraction-num-devices": "2"}, None,
     "cannot request multiple fractional devices without specifying fraction portion or gpu-memory"),
    ({"gpu-fraction": "0.5", "gpu-memory": "1000"}, None, "cannot request both GPU and GPU memory"),
]


async def test_s31_fraction_pods_denied_with_kai_messages(kube, ns, admission):
    await wait_active(kube, ns)
    for i, (notes, limits, message) in enumerate(S31):
        text = await denial(kube, PODS.path(ns), pod(f"bad-{i}", notes, limits))
        assert 'admission webhook "pods.validate.shoal.io" denied the request' in text, text
        assert message in text, (notes, text)
    items, _ = await kube.list(PODS, namespace=ns)
    assert not [p for p in items if p["metadata"]["name"].startswith("bad-")]
    plain, _ = await create(kube, PODS.path(ns), pod("whole", limits={"nvidia.com/gpu": "1"}))
    assert plain["metadata"]["name"] == "whole"
    other = pod("other-scheduler", {"gpu-fraction": "7"})
    other["spec"]["schedulerName"] = "default-scheduler"
    created, _ = await create(kube, PODS.path(ns), other)  # not Shoal's pod: not our business
    assert created["metadata"]["name"] == "other-scheduler"


async def test_runtime_class_injected_only_when_it_exists(kube, ns, admission):
    await wait_active(kube, ns)
    created, warnings = await create(kube, PODS.path(ns), pod("half-a", {"gpu-fraction": "0.5"}))
    assert "runtimeClassName" not in created["spec"], "a RuntimeClass that does not exist must not be injected"
    assert any(f"RuntimeClass '{admission.runtime_class}' does not exist" in w for w in warnings), warnings
    # the GPU container reads its GPU from the pod's ConfigMaps (KAI's names), whatever the RuntimeClass
    prefix = created["metadata"]["annotations"]["runai/shared-gpu-configmap"]
    assert prefix.startswith("half-a-") and prefix.endswith("-shared-gpu"), prefix
    container = created["spec"]["containers"][0]
    refs = {e["name"]: e["valueFrom"]["configMapKeyRef"]["name"] for e in container["env"]}
    assert refs == dict.fromkeys(("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION"), f"{prefix}-0")
    assert container["envFrom"] == [{"configMapRef": {"name": f"{prefix}-0-evar"}}]
    # pods made by a controller (generateName) never show admission warnings to a user: the event does
    await kube.create(JOBS, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "halfjob"},
                             "spec": {"backoffLimit": 0, "template": {
                                 **pod("unused", {"gpu-fraction": "0.5"}),
                                 "spec": {**pod("x")["spec"], "restartPolicy": "Never"}}}}, namespace=ns)

    async def events_for(prefix: str) -> list[dict]:
        items, _ = await kube.list(CORE_EVENTS, namespace=ns)
        return [e for e in items if e.get("reason") == "RuntimeClassNotInjected"  # this module's service only
                and e["involvedObject"]["name"].startswith(prefix) and admission.runtime_class in e["message"]]

    [event] = await eventually(lambda: events_for("half-a"), timeout_s=20, what="a RuntimeClassNotInjected event")
    assert event["type"] == "Warning" and event["involvedObject"]["uid"] == created["metadata"]["uid"]
    assert f"RuntimeClass '{admission.runtime_class}' does not exist" in event["message"]
    [job_event] = await eventually(lambda: events_for("halfjob-"), timeout_s=30, what="the Job pod's event")
    assert job_event["involvedObject"]["uid"]
    await kube.create(RUNTIME_CLASSES, {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                        "metadata": {"name": admission.runtime_class}, "handler": "nvidia"})
    try:
        attempt = 0

        async def injected() -> dict | None:
            nonlocal attempt
            attempt += 1
            obj, _ = await create(kube, PODS.path(ns), pod(f"half-b{attempt}", {"gpu-fraction": "0.5"}))
            return obj if obj["spec"].get("runtimeClassName") == admission.runtime_class else None

        await eventually(injected, timeout_s=20, interval_s=1, what="runtimeClassName injection")
        whole, _ = await create(kube, PODS.path(ns), pod("whole-gpu", limits={"nvidia.com/gpu": "1"}))
        assert "runtimeClassName" not in whole["spec"], "whole-GPU pods get no runtimeClassName"
    finally:
        await kube.delete(RUNTIME_CLASSES, admission.runtime_class)


def queue(name: str, run_id: str, parent: str | None = None, **resources: Any) -> dict:
    spec: dict = {"resources": resources}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": name, "labels": {TEST_LABEL: run_id}}, "spec": spec}


FULL = {"quota": -1, "limit": -1, "overQuotaWeight": 1}


async def test_queue_denials_and_warnings(kube, ns, admission):
    run = admission.run_id
    made: list[str] = []

    async def ok(doc: dict) -> list[str]:
        _, warnings = await create(kube, QUEUES.path(), doc)
        made.append(doc["metadata"]["name"])
        return warnings

    try:
        await wait_active(kube, ns)
        parent = f"p-{run}"
        await ok(queue(parent, run, gpu={"quota": 2, "limit": -1}, cpu=FULL, memory=FULL))
        text = await denial(kube, QUEUES.path(), queue(f"neg-{run}", run, gpu={"quota": -2, "limit": -1},
                                                       cpu=FULL, memory=FULL))
        assert "resources.gpu.quota: must be -1 (unlimited) or >= 0, got -2" in text, text
        text = await denial(kube, QUEUES.path(), queue(f"low-{run}", run, gpu={"quota": 4, "limit": 2},
                                                       cpu=FULL, memory=FULL))
        assert "resources.gpu.limit (2) must not be below quota (4)" in text, text
        text = await denial(kube, QUEUES.path(), queue(f"orphan-{run}", run, parent=f"ghost-{run}", gpu=FULL,
                                                       cpu=FULL, memory=FULL))
        assert f"parent queue 'ghost-{run}' does not exist" in text, text
        warnings = await ok(queue(f"a-{run}", run, parent=parent, gpu={"quota": 1}, cpu=FULL, memory=FULL))
        assert any("limit omitted: Shoal reads it as limit = quota (1)" in w for w in warnings), warnings
        warnings = await ok(queue(f"b-{run}", run, parent=parent, gpu={"quota": 2, "limit": 0}, cpu=FULL,
                                  memory=FULL))
        assert any("explicit limit 0 is a hard cap of 0 although quota is 2" in w for w in warnings), warnings
        assert any(f"child queues of '{parent}' have gpu quotas summing to 3, more than its quota 2" in w
                   for w in warnings), warnings
        text = await _delete_denial(kube, parent)
        assert f"queue '{parent}' still has child queues" in text, text
    finally:
        for name in reversed(made):
            try:
                await kube.delete(QUEUES, name)
            except NotFoundError:
                pass


async def _delete_denial(kube: Kube, name: str) -> str:
    with pytest.raises(PermanentError) as info:
        await kube.delete(QUEUES, name)
    return str(info.value)


async def test_malformed_review_is_denied_with_a_clear_message(kube, admission):
    config = await kube.request("GET", f"{VALIDATING}/{admission.config_name}")
    url = next(h["clientConfig"]["url"] for h in config["webhooks"] if h["name"] == "pods.validate.shoal.io")
    context = ssl.create_default_context(cafile=str(admission.state / "tls" / "ca.crt"))
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=b"{not json", ssl=context) as response:
            assert response.status == 200
            answer = await response.json()
        async with session.post(url, json={"kind": "AdmissionReview"}, ssl=context) as response:
            missing = await response.json()
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"].startswith("malformed AdmissionReview: not JSON")
    assert missing["response"]["status"]["message"] == "malformed AdmissionReview: no request object"
    await asyncio.sleep(0)
    assert "admission_review" in admission.log()


async def test_stale_self_registration_is_removed_live_one_kept(kube, admission):
    from services.admission.registration import VALIDATING as VALIDATING_RESOURCE
    from services.admission.registration import configurations, remove_stale
    from shoal.devstack.procs import free_port

    stale_name = f"shoal-admission-stale-{admission.run_id}"
    _, stale = configurations(stale_name, f"https://127.0.0.1:{free_port()}", b"not-a-ca",
                              namespace_selector=f"{TEST_LABEL}=nobody-{admission.run_id}",
                              queue_selector=f"{TEST_LABEL}=nobody-{admission.run_id}")
    await kube.create(VALIDATING_RESOURCE, stale)
    removed = await remove_stale(kube, keep="")
    assert f"ValidatingWebhookConfiguration/{stale_name}" in removed
    assert not [r for r in removed if admission.config_name in r], "a live registration must be kept"
    with pytest.raises(NotFoundError):
        await kube.get(VALIDATING_RESOURCE, stale_name)
    await kube.get(VALIDATING_RESOURCE, admission.config_name)

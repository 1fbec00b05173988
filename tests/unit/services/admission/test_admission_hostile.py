"""The admission rules on hostile objects, without I/O: whatever a review carries (wrong types, huge numbers,
1e400, negative or fractional quantities, unicode, lone surrogates, deep nesting, missing or null fields),
the pure functions answer (a denial text, a verdict, a JSON patch) and never raise.

Budget: `SHOAL_FUZZ_EXAMPLES` (tests/hostile_values.py). The corpus holds every input that once raised.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from services.admission import podgroups, sharing
from services.admission import translate as t
from services.admission.handlers import parse_review
from tests.hostile_values import EXAMPLES, EXTREME, mutate, mutated, nested
from tests.unit.services.admission.test_admission_handlers import client, post, review

FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ANNOTATION_KEYS = ["gpu-fraction", "gpu-memory", "gpu-fraction-num-devices", "gpu-fraction-container-name", "mps",
                   "runai/shared-gpu-configmap", "nvidia.com/container.c.gpu-memory.request",
                   "nvidia.com/container.c.gpu-memory.limit", "nvidia.com/container.c.gpu-compute.mode",
                   "nvidia.com/container.c.gpus.devices", "nvidia.com/container..gpu-memory.limit"]
POD = {"metadata": {"name": "p", "namespace": "ns", "generateName": "p-", "labels": {"kai.scheduler/node-pool": "a"},
                    "annotations": {"gpu-fraction": "0.5", "gpu-fraction-container-name": "c"},
                    "ownerReferences": [{"name": "job"}]},
       "spec": {"schedulerName": "shoal-scheduler",
                "containers": [{"name": "c", "env": [{"name": "A", "value": "1"}], "envFrom": [],
                                "resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}}}],
                "initContainers": [{"name": "i"}]}}
QUEUE = {"metadata": {"name": "q"},
         "spec": {"parentQueue": "dept", "resources": {"gpu": {"quota": 4, "limit": 8, "overQuotaWeight": 1},
                                                       "cpu": {"quota": -1, "limit": -1},
                                                       "memory": {"quota": 0}}}}
DEPT = {"metadata": {"name": "dept"}, "spec": {"resources": {"gpu": {"quota": 2, "limit": -1}}}}
PODGROUP = {"metadata": {"name": "pg", "annotations": {"kai.scheduler/last-start-timestamp": "2026-01-01T00:00:00Z"}},
            "spec": {"preemptibility": "semi-preemptible", "minMember": 2, "minSubGroup": 1,
                     "subGroups": [{"name": "a", "minMember": 1}, {"name": "b", "parent": "a", "minMember": 1}]},
            "status": {"schedulingState": {"corePods": ["p"]}}}
MODES = ["NonMemoryEnforced", "HamiCore", "NvFractions", "Disabled"]


@st.composite
def hostile_pod(draw: st.DrawFn) -> object:
    pod = mutate(draw, POD, EXTREME)
    if isinstance(pod, dict) and isinstance(pod.get("metadata"), dict) and draw(st.booleans()):
        pod["metadata"]["annotations"] = draw(st.dictionaries(st.sampled_from(ANNOTATION_KEYS), EXTREME, max_size=4))
    return pod


def check_pod(pod: object, mode: str) -> None:
    """Validation gives None or a text; a mutation gives a JSON patch (and warnings); nothing raises."""
    pod = pod if isinstance(pod, dict) else {}
    denial = t.validate_pod(pod, mode=mode)
    assert denial is None or (isinstance(denial, str) and denial)
    assert isinstance(sharing.pod_mode(pod, mode, {"a": "HamiCore"}), str)
    mutation = t.mutate_pod(pod, runtime_class="nvidia", runtime_class_exists=True, mode=mode)
    json.dumps(mutation.patch)
    assert all(isinstance(w, str) for w in mutation.warnings)
    assert isinstance(t.pod_display_name(pod), str)


# ---- the corpus: objects that once raised out of the rules ---------------------------------------------------
def _pod_with(annotations: dict | None = None, **spec: object) -> dict:
    return {"metadata": {"name": "p", "annotations": annotations or {}},
            "spec": {"schedulerName": "shoal-scheduler", "containers": [{"name": "c"}], **spec}}


POD_CORPUS = {
    "memory_superscript_digit": _pod_with({"gpu-memory": "²"}),
    "memory_5000_digits": _pod_with({"gpu-memory": "9" * 5000}),
    "devices_superscript_digit": _pod_with({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "³"}),
    "init_containers_a_number": _pod_with({"nvidia.com/container.c.gpu-memory.request": "1Gi"}, initContainers=5),
    "compute_mode_a_list": {"metadata": {"annotations": {"nvidia.com/container.c.gpu-compute.mode": ["x"]}},
                            "spec": {"schedulerName": "shoal-scheduler", "containers": [{"name": "c"}]}},
    "container_name_a_dict": _pod_with({"gpu-fraction": "0.5", "gpu-fraction-container-name": {"a": 1}}),
    "deep_annotation": _pod_with({"gpu-fraction": nested(900)}),
    "container_memory_5000_digits": _pod_with({"nvidia.com/container.c.gpu-memory.request": "9" * 5000}),
}


@pytest.mark.parametrize("name", sorted(POD_CORPUS))
@pytest.mark.parametrize("mode", MODES)
def test_a_once_raising_pod_is_answered(name: str, mode: str) -> None:
    check_pod(POD_CORPUS[name], mode)


def test_a_denial_quotes_a_huge_value_cut_short() -> None:
    queue = {"metadata": {"name": "q"}, "spec": {"resources": {"gpu": {"quota": "x" * 100_000}}}}
    assert t.validate_queue("CREATE", queue, None, []).denial == (
        "resources.gpu.quota: must be a number, got " + repr("x" * 100_000)[:80] + "... (100002 characters)")


def test_unicode_and_huge_digit_counts_are_denied_with_the_kai_message() -> None:
    for value in ("²", "9" * 5000, "١٢"):
        assert t.validate_pod(_pod_with({"gpu-memory": value})) == t.MEMORY_POSITIVE


QUEUE_CORPUS = {
    "quota_int_past_a_float": {"metadata": {"name": "q"}, "spec": {"resources": {"gpu": {"quota": 10**400}}}},
    "weight_negative_past_a_float": {"metadata": {"name": "q"},
                                     "spec": {"resources": {"gpu": {"overQuotaWeight": -(10**400)}}}},
    "limit_inf": {"metadata": {"name": "q"}, "spec": {"resources": {"gpu": {"limit": float("inf")}}}},
}


@pytest.mark.parametrize("name", sorted(QUEUE_CORPUS))
def test_a_once_raising_queue_is_answered(name: str) -> None:
    verdict = t.validate_queue("CREATE", QUEUE_CORPUS[name], None, [DEPT])
    assert verdict.denial and "must be a number" in verdict.denial


# ---- the search ------------------------------------------------------------------------------------------
@FUZZ
@given(pod=hostile_pod(), mode=st.sampled_from(MODES))
def test_a_hostile_pod_is_validated_and_mutated_without_raising(pod: object, mode: str) -> None:
    check_pod(pod, mode)


@FUZZ
@given(queue=mutated(QUEUE, EXTREME), existing=st.lists(st.sampled_from([DEPT, QUEUE, {"metadata": {"name": "c"}, "spec": {"parentQueue": "q"}}]),
                      max_size=3),
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", ""]))
@example(queue={"metadata": {"name": "q"}, "spec": {"resources": {"cpu": {"limit": 10**400}}}}, existing=[],
         operation="UPDATE")
def test_a_hostile_queue_gets_a_verdict(queue: object, existing: list, operation: str) -> None:
    queue = queue if isinstance(queue, dict) else {}
    verdict = t.validate_queue(operation, queue, queue, existing)
    assert verdict.denial is None or isinstance(verdict.denial, str)
    assert len(verdict.denial or "") < 2000  # hostile values are quoted cut short
    assert all(isinstance(w, str) for w in verdict.warnings)


@FUZZ
@given(old=mutated(PODGROUP, EXTREME), new=mutated(PODGROUP, EXTREME))
def test_a_hostile_podgroup_update_gets_a_verdict(old: object, new: object) -> None:
    denial = podgroups.validate_update(old if isinstance(old, dict) else {}, new if isinstance(new, dict) else {})
    assert denial is None or isinstance(denial, str)


REVIEW_CORPUS = [b"", b"\xff\xfe", b"[" * 100_000, b'{"request":' * 5000, b"1e400", b'{"request": {"uid": 1e400}}',
                 b'{"request": {"uid": "' + b"\\ud800" + b'"}}', b"\x00" * 10, b'{"request": {"uid": ' + b"9" * 5000 + b"}}"]


@pytest.mark.parametrize("body", REVIEW_CORPUS, ids=range(len(REVIEW_CORPUS)))
def test_a_once_raising_body_is_read_or_refused(body: bytes) -> None:
    request, uid, problem = parse_review(body)
    assert (request is None) == bool(problem)
    assert request is not None or problem.startswith("malformed AdmissionReview: ")


@FUZZ
@given(body=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode),
                      st.builds(lambda doc, cut: json.dumps(doc).encode()[:cut],
                                st.just({"request": {"uid": "u", "object": POD}}), st.integers(0, 400))))
def test_any_body_is_read_or_refused_with_a_problem(body: bytes) -> None:
    request, uid, problem = parse_review(body)
    assert (request is None) == bool(problem)
    if request is not None:
        assert uid


# ---- the endpoints (aiohttp test server): every body gets a review back -----------------------------------
HOOKS = ("/validate-pods", "/mutate-pods", "/validate-queues", "/validate-podgroups")
CATCH_ALL = "shoal admission could not process the object"  # the handlers' last resort: never reached


def answered(response: dict) -> None:
    """An AdmissionReview response: allowed, or denied with a message that says what is wrong."""
    assert isinstance(response["uid"], str) and isinstance(response["allowed"], bool)
    if not response["allowed"]:
        message = response["status"]["message"]
        assert message and CATCH_ALL not in message and len(message) <= 2048 + 3  # cut short: MAX_MESSAGE


async def test_a_once_failing_body_is_answered_by_every_endpoint() -> None:
    c = await client()
    try:
        for path in HOOKS:
            for body in REVIEW_CORPUS:
                answered(await post(c, path, body))
        assert (await post(c, "/validate-pods", b"[" * 100_000))["status"]["message"] == (
            "malformed AdmissionReview: nested too deeply to read")
        too_large = await c.post("/validate-pods", data=b" " * (2 * 2**20))  # the test app keeps 1 MiB
        assert too_large.status == 413
        assert (await too_large.json())["response"]["status"]["message"] == (
            "malformed AdmissionReview: body larger than 1048576 bytes")
        for path in HOOKS:  # still serving
            assert (await post(c, path, review(POD, uid="after")))["uid"] == "after"
    finally:
        await c.close()

"""The decode layer of every Kafka consumer on hostile values, without I/O: random bytes, truncated JSON of each
real message type, valid JSON of the wrong shape, unknown extra fields, messages from another version (a
future `type` tag, a missing required field, a later schema field) and deep nesting either decode into the
consumer's type or raise one of `UNDECODABLE` (the consumer loop dead-letters those), never anything else.
The api's decision tail (an observer, no dead letters) skips what is not a decision, and nothing it keeps
breaks its index, filters or views.

Consumers: planner and fairshare (SnapshotPublished on shoal.snapshots.v1), binder (PlanIssued on
shoal.plans.v1), api (decision events on shoal.decisions.v1). Budget: `SHOAL_FUZZ_EXAMPLES`.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.api.decisions import DecisionIndex, decode, matches
from services.api.history import History
from services.api.workloads import Evictions
from shoal.adapters.kafka import UNDECODABLE, Consumer
from shoal.core.plan import Bind, ConditionReason, Evict, QueueFigures, Reserve, SetCondition
from shoal.messages.base import new_meta
from shoal.messages.decisions import decision
from shoal.messages.plan import PlanIssued
from shoal.messages.snapshot import SnapshotPublished
from shoal.settings import KafkaSettings
from tests.hostile_values import EXAMPLES, EXTREME, mutated

FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SNAPSHOT = SnapshotPublished(meta=new_meta("snapshotter", revision=3), shard="pool-a", revision=3, nodes=2, pods=5,
                             pending_pods=1, chain="c1")
PLAN = PlanIssued(meta=new_meta("planner", revision=3, id="plan-1"), shard="pool-a", plan_id="plan-1", revision=3,
                  ops=(Reserve(node="n1", gpu_group="g1", gpu_index=0),
                       Bind(pod="ns/p", pod_uid="u1", node="n1", gpu_groups=("g1",), fraction="0.50", gpus=1),
                       Evict(pod="ns/v", pod_uid="u2", node="n1", action="reclaim", by="ns/pg", message="m"),
                       SetCondition(pod_group="ns/pg", reason="OverLimit", message="m",
                                    reasons=(ConditionReason(reason="OverLimit", message="m"),))),
                  queues=(QueueFigures(name="q"),))
SAMPLES = {"SnapshotPublished": SNAPSHOT, "PlanIssued": PLAN}


def consumer(message_type: Any) -> Consumer[Any]:
    """The consumer the services build (nothing connects before start())."""
    async def handler(message: Any, delivery: Any) -> None:
        return None

    return Consumer(KafkaSettings(), ["t"], group_id="g", message_type=message_type, handler=handler)


CONSUMERS = {name: consumer(type(sample)) for name, sample in SAMPLES.items()}


def decoded_or_undecodable(name: str, value: bytes) -> bool:
    """True when `value` decoded into the consumer's type, False when it raised one of UNDECODABLE."""
    try:
        message = CONSUMERS[name].decode(value)
    except UNDECODABLE:
        return False
    assert isinstance(message, type(SAMPLES[name]))
    return True


def _doc(name: str) -> dict:
    return msgspec.to_builtins(SAMPLES[name])


# ---- messages from another version, and the corpus ---------------------------------------------------------
def _without(doc: dict, *path: str) -> dict:
    doc = json.loads(json.dumps(doc))
    target = doc
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return doc


VERSIONS = {  # (consumer, document, decodes?)
    "future_type_tag": ("SnapshotPublished", {**_doc("SnapshotPublished"), "type": "snapshot_published_v2"}, False),
    "no_type_tag": ("PlanIssued", _without(_doc("PlanIssued"), "type"), True),  # one type: a tag is optional
    "missing_shard": ("SnapshotPublished", _without(_doc("SnapshotPublished"), "shard"), False),
    "missing_meta_id": ("PlanIssued", _without(_doc("PlanIssued"), "meta", "id"), False),
    "future_op": ("PlanIssued", {**_doc("PlanIssued"), "ops": [{"op": "Teleport", "pod": "ns/p"}]}, False),
    "unknown_fields": ("SnapshotPublished", {**_doc("SnapshotPublished"), "zone": "eu", "extra": {"a": [1]}}, True),
    "later_schema_field": ("PlanIssued", {**_doc("PlanIssued"), "schema": 2, "priority": 7}, True),
    "unknown_op_field": ("PlanIssued", {**_doc("PlanIssued"), "ops": [
        {**msgspec.to_builtins(PLAN.ops[1]), "topology": {"rack": "r1"}}]}, True),
    "revision_past_int64": ("SnapshotPublished", {**_doc("SnapshotPublished"), "revision": 2**64}, True),
    "revision_a_string": ("SnapshotPublished", {**_doc("SnapshotPublished"), "revision": "3"}, False),
    "ops_an_object": ("PlanIssued", {**_doc("PlanIssued"), "ops": {"0": {}}}, False),
    "wrong_type": ("SnapshotPublished", [1, 2, 3], False),
}


@pytest.mark.parametrize("case", sorted(VERSIONS))
def test_a_message_from_another_version_decodes_or_is_undecodable(case: str) -> None:
    name, doc, decodes = VERSIONS[case]
    assert decoded_or_undecodable(name, json.dumps(doc).encode()) is decodes


def test_an_unknown_field_nested_too_deeply_is_undecodable() -> None:
    whole = msgspec.json.encode(PLAN)
    assert decoded_or_undecodable("PlanIssued", whole[:-1] + b', "extra": ' + b"[" * 5000 + b"]" * 5000 + b"}") is False


BYTES_CORPUS = [b"", b"\x00", b"\xff\xfe\xfd", b"null", b"[" * 100_000, b'{"meta":' * 50_000, b"1e400",
                b'{"type": "plan_issued", "meta": {"id": "\\ud800"}}', b"9" * 5000]


@pytest.mark.parametrize("name", sorted(SAMPLES))
@pytest.mark.parametrize("value", BYTES_CORPUS, ids=range(len(BYTES_CORPUS)))
def test_a_once_crashing_value_is_undecodable(name: str, value: bytes) -> None:
    assert decoded_or_undecodable(name, value) is False


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_truncation_of_a_real_message_is_undecodable(name: str) -> None:
    whole = msgspec.json.encode(SAMPLES[name])
    assert decoded_or_undecodable(name, whole)
    assert not any(decoded_or_undecodable(name, whole[:cut]) for cut in range(len(whole)))


# ---- the search ------------------------------------------------------------------------------------------
@FUZZ
@given(name=st.sampled_from(sorted(SAMPLES)), value=st.binary(max_size=300))
def test_random_bytes_decode_or_are_undecodable(name: str, value: bytes) -> None:
    decoded_or_undecodable(name, value)


@FUZZ
@given(data=st.data(), name=st.sampled_from(sorted(SAMPLES)))
def test_a_mutated_message_decodes_or_is_undecodable(data: st.DataObject, name: str) -> None:
    doc = data.draw(mutated(_doc(name), EXTREME))
    decoded_or_undecodable(name, json.dumps(doc).encode())


# ---- the api's decision tail ----------------------------------------------------------------------------------
DECISION = msgspec.to_builtins(decision("evicted", source="shoal/binder/pool-a", subject="ns/p", shard="pool-a",
                                        plan_id="plan-1", data={"podGroup": "ns/pg", "node": "n1", "by": "ns/x"}))


def file_decision(value: bytes) -> None:
    """What the api does with a record: decode, then index, filter and count it (nothing may raise)."""
    event = decode(value)
    if event is None:
        return
    index, evictions, history = DecisionIndex(per_subject=2, subjects=2, recent=2), Evictions(), History()
    index.add(event)
    index.about([str(event.get("subject")), "ns/pg"])
    matches(event, subject="ns/p", shard="pool-a")
    evictions.add(event)
    evictions.list({})
    history.count(event)
    json.dumps(index.recent())


DECISION_CORPUS = {
    "deep": b"[" * 100_000, "data_a_list": json.dumps({**DECISION, "data": [1]}).encode(),
    "data_a_string": json.dumps({**DECISION, "data": "x"}).encode(),
    "subject_a_list": json.dumps({**DECISION, "subject": ["a"]}).encode(),
    "shard_an_object": json.dumps({**DECISION, "shard": {"a": 1}}).encode(),
    "pod_group_a_list": json.dumps({**DECISION, "data": {"podGroup": ["a"]}}).encode(),
}


@pytest.mark.parametrize("case", sorted(DECISION_CORPUS))
def test_a_once_crashing_decision_is_skipped(case: str) -> None:
    assert decode(DECISION_CORPUS[case]) is None
    file_decision(DECISION_CORPUS[case])


def test_a_decision_with_unknown_fields_is_kept() -> None:
    assert decode(json.dumps({**DECISION, "priority": 7, "data": {**DECISION["data"], "x": [1]}}).encode())


@FUZZ
@given(value=st.one_of(st.binary(max_size=200), mutated(DECISION, EXTREME).map(lambda d: json.dumps(d).encode())))
def test_any_decision_record_is_filed_or_skipped(value: bytes) -> None:
    file_decision(value)

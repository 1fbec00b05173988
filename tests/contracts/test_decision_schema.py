"""The decision stream's JSON Schema accepts what the services emit and rejects malformed events."""

import json
from pathlib import Path

import jsonschema
import msgspec
import pytest

from shoal.messages.decisions import decision

SCHEMA = json.loads((Path(__file__).parent / "decision.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())


def as_json(event) -> dict:
    return json.loads(msgspec.json.encode(event))


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        ("scheduled", {"node": "n1", "podGroup": "ns/pg", "gpuGroups": [], "fraction": None}),
        ("pipelined", {"node": "n1", "podGroup": "ns/pg"}),
        ("unschedulable", {"reason": "Unschedulable", "message": "Resources were found for 4 pods while 5 are required"}),
        ("evicted", {"action": "reclaim", "by": "ns/pg", "message": "Pod ns/p was preempted by workload ns/pg."}),
        ("bound", {"node": "n1"}),
        ("bind-failed", {"node": "n1", "error": "pod already bound"}),
        ("gpu-shared", {"node": "n1", "gpuGroups": ["g1"], "fraction": "0.50"}),
    ],
)
def test_every_kind_validates(kind, data):
    event = decision(kind, source="shoal/planner/default", subject="ns/p", shard="default", data=data)
    VALIDATOR.validate(as_json(event))


def test_missing_required_data_is_rejected():
    event = decision("evicted", source="shoal/planner/default", subject="ns/p", shard="default",
                     data={"action": "reclaim"})
    errors = list(VALIDATOR.iter_errors(as_json(event)))
    assert errors, "an eviction without evictor and message must not validate"


def test_unknown_kind_is_refused_at_the_source():
    with pytest.raises(ValueError, match="unknown decision kind"):
        decision("teleported", source="shoal/planner/x", subject="ns/p", shard="x")

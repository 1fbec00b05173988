"""Reading API objects' fields never raises, whatever is absent, null or of another type."""

from hypothesis import given
from hypothesis import strategies as st

from shoal.core.fields import items, mapping, text, value_at

KEYS = st.sampled_from(["metadata", "status", "spec", "conditions", "annotations", "uid", "nodeName"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)


@given(JSON, st.lists(KEYS, min_size=1, max_size=4))
def test_any_object_and_any_path_reads_without_raising_and_with_the_promised_type(obj, path):
    assert isinstance(mapping(obj, *path), dict)
    assert isinstance(items(obj, *path), list)
    assert isinstance(text(obj, *path), str)
    value = value_at(obj, *path, default="absent")
    assert value is not None
    expected = obj
    for key in path:
        expected = expected.get(key) if isinstance(expected, dict) else None
    assert value == ("absent" if expected is None else expected)


def test_a_null_field_reads_as_absent():
    crd = {"metadata": {"name": "queues.scheduling.run.ai", "annotations": None}, "status": {"conditions": None}}
    assert items(crd, "status", "conditions") == []
    assert mapping(crd, "metadata", "annotations") == {}
    assert text(crd, "metadata", "name") == "queues.scheduling.run.ai"
    assert value_at({"status": None}, "status", "phase") is None
    assert items({"status": {"conditions": [{"type": "Established"}]}}, "status", "conditions") == [
        {"type": "Established"}]
    assert text({"spec": {"nodeName": 3}}, "spec", "nodeName") == ""

"""Hostile values for the fuzz tests: what a hostile user (or a producer from another version) puts where a
valid manifest, review or message has a value, and a mutator that puts them there.

`EXAMPLES` is the hypothesis budget of every fuzz test: `SHOAL_FUZZ_EXAMPLES` (default 120 in the suite),
e.g. `SHOAL_FUZZ_EXAMPLES=5000 uv run pytest tests/unit/cli/test_simulate_hostile.py -q` for a longer run
(docs/fuzzing.md).
"""

from __future__ import annotations

import copy
import os

from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("SHOAL_FUZZ_EXAMPLES", "120"))


def nested(depth: int, leaf: object = 1) -> object:
    """`depth` levels of lists around `leaf` (built without recursion)."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


HOSTILE = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["1e400", "-1", "abc", "1.5", "0.5", "1e30", "9223372036854775808", "", "💥ünï", "1Ei", "100m",
                     "-0.5", "2026-13-45T99:00:00Z", "1e-400", "0x10", " ", "dept", "q", "ns/p", "-1s", "NaN"]),
    st.lists(st.integers(min_value=-3, max_value=3), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(min_value=-3, max_value=3), max_size=3),
)

# more than a manifest can carry: digits past Python's int-string limit, unicode digits that are not
# decimal, lone surrogates, numbers past a float, deep nesting
EXTREME = st.one_of(
    HOSTILE,
    st.sampled_from(["9" * 5000, "²", "١٢", "\ud800", "a\x00b", "1" * 400, 10**400, -(10**400), 2**64, -(2**63) - 1,
                     "0.0000001", "-0", "1e-5", "∞", "Ⅻ"]),
    st.builds(nested, st.just(200)), st.builds(lambda: {"a": nested(50, {})}),
    st.text(min_size=1, max_size=8).map(lambda s: s * 2000),
)


def paths(value: object, prefix: tuple = ()) -> list[tuple]:
    """Every key path inside `value` (dict keys and list indices)."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            out.extend(paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out.extend(paths(child, (*prefix, i)))
    return out


def mutate(draw: st.DrawFn, doc: object, values: st.SearchStrategy = HOSTILE, *, at_most: int = 4) -> object:
    """A copy of `doc` with 1..`at_most` places replaced by a drawn value, or deleted."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(min_value=1, max_value=at_most))):
        where = paths(doc)
        if not where:
            return copy.deepcopy(draw(values))
        path = draw(st.sampled_from(where))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if draw(st.booleans()) and isinstance(parent, dict):
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = copy.deepcopy(draw(values))
    return doc


def mutated(doc: object, values: st.SearchStrategy = HOSTILE, *, at_most: int = 4) -> st.SearchStrategy:
    """A strategy of `mutate`d copies of `doc`."""
    return st.composite(lambda draw: mutate(draw, doc, values, at_most=at_most))()

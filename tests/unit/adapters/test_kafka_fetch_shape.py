"""`adapt_fetch_wait` on a client it does not know keeps the consumer's fixed wait instead of failing its start;
on the pinned client it changes only the wait of fetches that ask for every assigned partition."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from shoal.adapters import kafka_fetch
from shoal.adapters.kafka_fetch import WAIT_ATTRIBUTE, adapt_fetch_wait


class Fetcher:
    """The two things `adapt_fetch_wait` uses of aiokafka's fetcher, answering with the requests it is given."""

    def __init__(self, requests: list[tuple[int, Any]]) -> None:
        self.requests = requests

    def _get_actions_per_node(self, assignment: Any) -> tuple:
        return (self.requests, {}, 0.1, False, [])


def request(*partitions: int) -> Any:
    return kafka_fetch.FetchRequest(50, 1, 1, 0, [("t", [(p, 0, 1) for p in partitions])])


def test_only_a_fetch_for_every_assigned_partition_gets_the_long_wait() -> None:
    assignment = SimpleNamespace(tps=[("t", 0), ("t", 1), ("t", 2)])
    for asked, wait in (((0, 1, 2), 500), ((0, 2), 50)):
        fetcher = Fetcher([(1, request(*asked))])
        assert adapt_fetch_wait(SimpleNamespace(_fetcher=fetcher), idle_ms=500) is True
        found = fetcher._get_actions_per_node(assignment)
        assert getattr(found[0][0][1], WAIT_ATTRIBUTE) == wait
    none = Fetcher([])
    adapt_fetch_wait(SimpleNamespace(_fetcher=none), idle_ms=500)
    assert none._get_actions_per_node(assignment)[0] == []  # nothing to fetch: nothing to change


def test_a_client_of_another_shape_keeps_the_fixed_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    assert adapt_fetch_wait(object(), idle_ms=500) is False  # no fetcher
    assert adapt_fetch_wait(SimpleNamespace(_fetcher=object()), idle_ms=500) is False  # another fetcher
    monkeypatch.setattr(kafka_fetch, "FetchRequest", [object])  # one request class per version, as older clients had
    assert adapt_fetch_wait(SimpleNamespace(_fetcher=Fetcher([])), idle_ms=500) is False

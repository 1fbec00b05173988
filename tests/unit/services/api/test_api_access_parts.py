"""The pure parts of the api's access checks (services/api/access.py): the answer cache (TTL, bound, work run
once for concurrent callers, failures not kept), the review attributes and messages, the token headers. The
reviews themselves are tested on the real apiserver (tests/e2e/test_api_access.py)."""

from __future__ import annotations

import asyncio

import pytest

from services.api.access import CLUSTER, METRICS, TtlCache, _token, event_namespace, namespace_permissions


async def test_the_cache_runs_the_work_once_for_concurrent_callers_and_keeps_it_for_its_ttl() -> None:
    cache, runs = TtlCache(ttl_s=0.2, size=10), []

    async def work() -> str:
        runs.append(1)
        await asyncio.sleep(0.05)
        return "answer"

    assert await asyncio.gather(*(cache.get("k", work) for _ in range(5))) == ["answer"] * 5
    assert await cache.get("k", work) == "answer" and len(runs) == 1
    await asyncio.sleep(0.25)
    assert await cache.get("k", work) == "answer" and len(runs) == 2  # expired: asked again


async def test_the_cache_is_bounded_and_keeps_no_failure() -> None:
    cache = TtlCache(ttl_s=60, size=3)

    async def value(v: int) -> int:
        return v

    for i in range(10):
        assert await cache.get(i, lambda i=i: value(i)) == i
    assert len(cache) == 3

    async def boom() -> int:
        raise RuntimeError("apiserver down")

    with pytest.raises(RuntimeError):
        await cache.get("x", boom)
    assert await cache.get("x", lambda: value(7)) == 7  # the failure was not kept


def test_review_attributes_and_messages() -> None:
    pods, groups = namespace_permissions("team-a")
    assert pods.attributes() == {"resourceAttributes": {"verb": "get", "group": "", "resource": "pods",
                                                        "namespace": "team-a"}}
    assert groups.text() == "get podgroups.scheduling.run.ai in namespace team-a"
    assert CLUSTER.attributes() == {"resourceAttributes": {"verb": "get", "group": "shoal.io",
                                                           "resource": "clusterviews"}}
    assert CLUSTER.text() == "get clusterviews.shoal.io (cluster-wide)" and CLUSTER.role == "shoal-cluster-viewer"
    assert METRICS.attributes() == {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}


def test_the_token_comes_from_either_header() -> None:
    assert _token({"Authorization": "Bearer abc"}) == "abc"
    assert _token({"Authorization": "bearer  abc "}) == "abc"
    assert _token({"X-Shoal-Authorization": "Bearer xyz"}) == "xyz"  # through the apiserver's service proxy
    assert _token({"Authorization": "Basic dXNlcg=="}) == "" and _token({"Authorization": "Bearer "}) == ""
    assert _token({}) == ""


def test_an_event_without_a_namespace_is_for_cluster_readers_only() -> None:
    assert event_namespace({"subject": "team-a/train-0"}) == "team-a"
    assert event_namespace({"subject": "queue-x"}) == "" and event_namespace({}) == ""

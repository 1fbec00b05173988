"""Min-runtime resolution (reference §4.6) and the preemption-delay window (S27) as plain functions."""

from __future__ import annotations

import msgspec
from builders import cluster, job, node, queue

from shoal.core.minruntime import (
    is_protected,
    preempt_min_runtime,
    preemption_delay_end,
    preemption_delay_message,
    reclaim_min_runtime,
)
from shoal.core.model import ShardConfig
from shoal.core.session import Session
from shoal.core.timetext import go_duration, rfc3339


def _q(name, parent="root", preempt=None, reclaim=None):
    return msgspec.structs.replace(queue(name, parent=parent), preempt_min_runtime_s=preempt,
                                   reclaim_min_runtime_s=reclaim)


def session(queues, jobs=(), config=None, now=1_000):
    return Session(cluster(nodes=[node("n1")], queues=queues, jobs=list(jobs), config=config, now=now))


TREE = [
    _q("dept", reclaim=600, preempt=300),
    _q("proj", parent="dept", reclaim=None),
    _q("own", parent="dept", reclaim=120),
    _q("other", reclaim=None),
]


def test_go_duration_matches_go():
    assert [go_duration(s) for s in (0, 30, 120, 90, 3600, 3661)] == ["0s", "30s", "2m0s", "1m30s", "1h0m0s", "1h1m1s"]


def test_rfc3339():
    assert rfc3339(220) == "1970-01-01T00:03:40Z"


def test_lca_uses_the_queue_below_the_common_ancestor_on_the_victims_side():
    s = session(TREE, config=ShardConfig(reclaim_min_runtime_s=7))
    # other -> proj: LCA root, one level down toward the victim: dept (600)
    assert reclaim_min_runtime(s, "other", "proj") == 600
    # own -> proj: LCA dept, one level down: proj (none) -> walk up: dept (600)
    assert reclaim_min_runtime(s, "own", "proj") == 600
    # proj -> own: LCA dept, one level down: own (120)
    assert reclaim_min_runtime(s, "proj", "own") == 120
    # dept subtree -> other: LCA root, one level down: other (none), then root (none): shard default
    assert reclaim_min_runtime(s, "proj", "other") == 7


def test_queue_method_walks_up_from_the_victims_queue():
    s = session(TREE, config=ShardConfig(reclaim_resolve_method="queue", reclaim_min_runtime_s=7))
    assert reclaim_min_runtime(s, "other", "own") == 120
    assert reclaim_min_runtime(s, "other", "proj") == 600
    assert reclaim_min_runtime(s, "proj", "other") == 7


def test_preempt_min_runtime_walks_up_then_shard_default():
    s = session(TREE, jobs=[job("v", queue="proj"), job("w", queue="other")],
                config=ShardConfig(preempt_min_runtime_s=9))
    assert preempt_min_runtime(s, s.jobs["ns/v"]) == 300
    assert preempt_min_runtime(s, s.jobs["ns/w"]) == 9


def test_protection_needs_a_start_stamp_and_a_positive_runtime():
    s = session(TREE, jobs=[job("v", queue="proj", last_start_timestamp="1970-01-01T00:15:00Z"),
                            job("w", queue="proj")], now=1_000)
    v, w = s.jobs["ns/v"], s.jobs["ns/w"]
    assert is_protected(s, v, 200)  # started at 900, now 1000
    assert not is_protected(s, v, 100)  # 900 + 100 = now: no longer protected
    assert not is_protected(s, v, 0)
    assert not is_protected(s, w, 10_000)  # no last-start-timestamp: no protection


def test_preemption_delay_window():
    s = session(TREE, jobs=[job("d", queue="proj", created=900, preemption_delay_s=120), job("e", queue="proj")],
                now=1_000)
    assert preemption_delay_end(s, s.jobs["ns/d"]) == 1_020
    assert preemption_delay_end(s, s.jobs["ns/e"]) is None
    late = session(TREE, jobs=[job("d", queue="proj", created=900, preemption_delay_s=120)], now=1_020)
    assert preemption_delay_end(late, late.jobs["ns/d"]) is None
    assert preemption_delay_message(120, 1_020) == (
        "Workload is within its preemption delay window (2m0s) and may not trigger evictions before "
        "1970-01-01T00:17:00Z"
    )


def test_preemption_delay_re_arms_after_an_eviction():
    spec = job("d", queue="proj", created=100, preemption_delay_s=120,
               last_eviction_timestamp="1970-01-01T00:15:00Z")  # evicted at 900
    s = session(TREE, jobs=[spec], now=1_000)
    assert preemption_delay_end(s, s.jobs["ns/d"]) == 1_020

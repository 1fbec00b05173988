"""Evictions in flight count until the cluster shows them: the next cycle sees the victim releasing and does not
evict again for the same need (with cycles 20 ms apart, a second reclaim used to take a third victim before the
first evictions reached the snapshot)."""

from __future__ import annotations

import time

from services.planner.translate import inflight_binds, inflight_entries, inflight_evictions
from services.snapshotter.handlers import settled
from services.snapshotter.translate import Shards
from shoal.core.cycle import run_cycle
from shoal.core.ingest.shard_model import assemble
from shoal.core.plan import Evict, Pipeline
from shoal.messages.snapshot import InFlightBind

NOW = "2026-01-01T00:00:00Z"


def node() -> dict:
    return {"kind": "Node", "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.memory": "81920"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"}}}


def queue(name: str) -> dict:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {"gpu": {"quota": 4, "limit": -1, "overQuotaWeight": 1}}}}


def job(name: str, queue_name: str, created: str, node_name: str | None = None) -> list[dict]:
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": name, "namespace": "ns", "uid": f"pg-{name}", "creationTimestamp": created},
             "spec": {"minMember": 1, "queue": queue_name, "priorityClassName": "train"}}
    spec: dict = {"schedulerName": "shoal-scheduler",
                  "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"{name}-0", "namespace": "ns", "uid": f"uid-{name}", "creationTimestamp": created,
                        "annotations": {"pod-group-name": name}, "labels": {"kai.scheduler/queue": queue_name}},
           "spec": spec, "status": {"phase": "Running" if node_name else "Pending",
                                    "startTime": created if node_name else None}}
    return [group, pod]


def test_a_second_cycle_before_the_evictions_show_evicts_nothing_more() -> None:
    shards = Shards("shoal-scheduler", now=lambda: NOW)
    objects = [node(), queue("a"), queue("b")]
    objects += [o for i in range(8) for o in job(f"a{i}", "a", f"2025-12-01T00:00:0{i}Z", "n1")]
    objects += [o for i in range(2) for o in job(f"b{i}", "b", "2025-12-02T00:00:00Z")]
    for obj in objects:
        assert shards.update(obj) is None
    model = shards.model("default")
    first = run_cycle(assemble(model, now=NOW, revision=1, require_podgroup=True).snapshot)
    evicted = [op for op in first.ops if isinstance(op, Evict)]
    assert len(evicted) == 2 and len([op for op in first.ops if isinstance(op, Pipeline)]) == 2

    entries = inflight_entries(first, now_s=time.time(), ttl_s=60)
    assert sorted(e.pod for e in entries if e.eviction) == sorted(op.pod for op in evicted)
    second = run_cycle(assemble(model, now=NOW, revision=2, inflight=inflight_binds(entries, time.time()),
                                evicting=inflight_evictions(entries, time.time()), require_podgroup=True).snapshot)
    assert not [op for op in second.ops if isinstance(op, Evict)], "evicted again before the first showed"
    assert len([op for op in second.ops if isinstance(op, Pipeline)]) == 2

    without = run_cycle(assemble(model, now=NOW, revision=2, require_podgroup=True).snapshot)
    assert [op for op in without.ops if isinstance(op, Evict)], "the test needs a cycle that would evict again"


def test_an_eviction_entry_settles_once_the_victim_is_deleting_or_gone() -> None:
    victim = job("a0", "a", NOW, "n1")[1]
    entry = InFlightBind(pod="ns/a0-0", pod_uid="uid-a0", node="n1", plan_id="p", expires_at=time.time() + 60,
                         eviction=True)
    assert not settled(entry, {"uid-a0": victim}, time.time())  # still running: keeps counting
    victim["metadata"]["deletionTimestamp"] = NOW
    assert settled(entry, {"uid-a0": victim}, time.time())
    assert settled(entry, {}, time.time())

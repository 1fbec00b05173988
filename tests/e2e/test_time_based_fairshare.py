"""Time-based fair share through the running services (SPEC §2.7, reference S38): a queue's recorded allocation
history shrinks its over-quota share, in the fairshare service's published figures and in the planner's plans;
and the fairshare service keeps recording the shard's allocation."""

from __future__ import annotations

import time
from typing import Any

import pytest
from e2e_helpers import decisions, eventually

from shoal.adapters import redis_keys
from shoal.adapters.kube import PODS, QUEUES
from shoal.adapters.latest_value import LatestValue
from shoal.adapters.redis_client import connect_redis
from shoal.adapters.usage_history import UsageHistory
from shoal.core.usage import Amounts, Sample, UsageParams
from shoal.messages.plan import FairShareComputed
from shoal.settings import RedisSettings

PARAMS = UsageParams()  # the services' defaults (SHOAL_USAGE_* unset)


def queue_doc(name: str) -> dict:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {"gpu": {"quota": 0, "limit": -1, "overQuotaWeight": 1},
                                   "cpu": {"quota": -1, "limit": -1}, "memory": {"quota": -1, "limit": -1}}}}


def pod(namespace: str, name: str, queue: str, pool: str, gpus: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"kai.scheduler/queue": queue, "kai.scheduler/node-pool": pool}},
            "spec": {"schedulerName": "shoal-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


async def test_recorded_usage_shrinks_a_queues_fair_share(shoal: Any, stack: Any, kube, namespace, node_pool,
                                                          gpu_nodes):
    a, b = f"a-{node_pool}", f"b-{node_pool}"
    redis = connect_redis(RedisSettings(url=stack.redis_url))
    history = UsageHistory(redis)
    try:
        # two hours in which queue A held half of the shard's 16 GPUs and B nothing, recorded before the shard's
        # first snapshot (as the fairshare service would have, sample by sample)
        now = time.time()
        for at in range(int(now) - 7200, int(now) - 30, 300):
            await history.record(node_pool, Sample(at_s=at, capacity=Amounts(gpu=16_000),
                                                   allocated={a: Amounts(gpu=8_000)}), PARAMS)
        injected = sum(bk.seconds for bk in (await history.buckets(node_pool))[1])
        for name in (a, b):
            await kube.create(QUEUES, queue_doc(name))
        try:
            for name in (a, b):  # both queues want the whole shard
                for i in range(2):
                    await kube.create(PODS, pod(namespace, f"{name[0]}-{i}", name, node_pool, 8), namespace=namespace)

            async def grouped():
                items, _ = await kube.list(PODS, namespace=namespace)
                return len([p for p in items if (p["metadata"].get("annotations") or {}).get("pod-group-name")]) == 4

            # the nodes come last: cycles start as soon as something changes, and with nodes already there A's
            # pods, created first, would be bound (and then reclaimed) before B's pods existed
            await eventually(grouped, timeout_s=60, what="the podgrouper to group the four pods")
            await gpu_nodes(2, gpus=8)
            shares = LatestValue(redis, redis_keys.fair_share, FairShareComputed)

            async def figures():
                current = await shares.get(node_pool)
                if current is None:
                    return None
                by_name = {q.name: q.gpu for q in current.value.queues}
                if a in by_name and b in by_name and by_name[a].request == 16_000 == by_name[b].request and (
                        by_name[a].fair_share + by_name[b].fair_share == 16_000):  # both nodes in the snapshot
                    return by_name
                return None

            gpu = await eventually(figures, timeout_s=90, what="fair-share figures of both queues")
            # S38: usage A=0.5, B=0, k=1 → over-quota weights 0.5 and 1.0 → 16 GPUs split 5 / 11 (8 / 8 without)
            assert (gpu[a].fair_share, gpu[b].fair_share) == (5_000, 11_000)

            async def planned():
                events = await decisions(stack.kafka_bootstrap, f"{shoal.topic_prefix}shoal.plans.v1")
                plans = [e for e in events if e.get("shard") == node_pool and e.get("queues")]
                for plan in reversed(plans):
                    by_name = {q["name"]: q["gpu"] for q in plan["queues"]}
                    if a in by_name and b in by_name and by_name[b]["request"] == 16_000 and (
                            by_name[a]["fair_share"] + by_name[b]["fair_share"] == 16_000):  # both nodes seen
                        return by_name
                return None

            plan = await eventually(planned, timeout_s=60, what="a plan with both queues")
            assert (plan[a]["fair_share"], plan[b]["fair_share"]) == (5_000, 11_000)

            # and the service keeps recording: the shard's history grows past what the test injected, and what it
            # adds once both nodes are in its snapshots is the whole shard's 16 GPUs for every second it covers (a
            # sample it took before the nodes existed rightly recorded a capacity of 0: not counted here; the
            # figures above are published after their sample is recorded, so every later sample saw both nodes)
            def totals(buckets) -> tuple[float, float]:
                return sum(bk.seconds for bk in buckets), sum(bk.capacity.gpu for bk in buckets)

            seen_s, seen_gpu = totals((await history.buckets(node_pool))[1])
            assert seen_s >= injected

            async def recorded():
                params, buckets = await history.buckets(node_pool)
                return (params, totals(buckets)) if totals(buckets)[0] > seen_s else None

            params, (now_s, now_gpu) = await eventually(recorded, timeout_s=60,
                                                        what="the fairshare service's own samples")
            assert params == PARAMS
            assert now_gpu - seen_gpu == pytest.approx(16_000 * (now_s - seen_s))
        finally:
            for name in (a, b):
                await kube.delete(QUEUES, name)
    finally:
        await history.clear(node_pool)
        await redis.aclose()

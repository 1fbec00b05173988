"""The allocation history against a real Redis: same figures as the pure reference, repeats ignored, bounded."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from redis.asyncio import Redis

from shoal.adapters import redis_keys
from shoal.adapters.usage_history import UsageHistory
from shoal.core.usage import Amounts, Sample, UsageParams, bucket_from_fields, normalised_usage, record

P = UsageParams(bucket_s=60, window_s=600)


@pytest.fixture
def shard() -> str:
    return f"usage-{uuid.uuid4().hex[:8]}"


def sample(at: float, a: float, b: float = 0.0) -> Sample:
    allocated = {"a": Amounts(gpu=a, cpu=a * 2)}
    if b:
        allocated["b"] = Amounts(gpu=b)
    return Sample(at_s=at, capacity=Amounts(gpu=8_000, cpu=16_000, memory=1 << 30), allocated=allocated)


async def test_redis_history_matches_the_pure_reference(redis: Redis, shard: str):
    history = UsageHistory(redis)
    reference: dict[int, dict[str, float]] = {}
    last = None
    samples = [sample(1000.0 + 7 * i, a=1_000 * (i % 4), b=500 if i % 3 else 0) for i in range(40)]
    for s in samples:
        await history.record(shard, s, P)
        last = record(reference, last, s, P)
    now = samples[-1].at_s
    params, buckets = await history.buckets(shard, now)
    assert params == P
    expected = normalised_usage([bucket_from_fields(k, v) for k, v in reference.items()], P, now)
    got = await history.usage(shard, now_s=now)
    assert set(got) == set(expected) == {"a", "b"}
    for q in expected:
        for r in ("gpu", "cpu", "memory"):
            assert got[q][r] == pytest.approx(expected[q][r], rel=1e-9)
    assert {b.start_s for b in buckets} == set(reference)
    await history.clear(shard)
    assert await redis.exists(redis_keys.usage_meta(shard), redis_keys.usage_index(shard)) == 0


async def test_repeated_and_concurrent_samples_count_once(redis: Redis, shard: str):
    history = UsageHistory(redis)
    await history.record(shard, sample(100.0, a=8_000), P)
    # the same snapshot handled by two owners during a rebalance, and redelivered: 10 s counted once
    covered = await asyncio.gather(*(history.record(shard, sample(110.0, a=8_000), P) for _ in range(5)))
    assert sorted(covered) == [0.0, 0.0, 0.0, 0.0, 10.0]
    assert await history.record(shard, sample(105.0, a=8_000), P) == 0.0  # an older one arriving late
    _, buckets = await history.buckets(shard, 110.0)
    assert [b.seconds for b in buckets] == [10.0]
    assert (await history.usage(shard, now_s=110.0))["a"]["gpu"] == pytest.approx(1.0)
    await history.clear(shard)


async def test_old_buckets_are_trimmed_and_expire(redis: Redis, shard: str):
    history = UsageHistory(redis)
    for at in range(0, 3000, 20):
        await history.record(shard, sample(float(at), a=1_000), P)
    starts = await redis.zrange(redis_keys.usage_index(shard), 0, -1)
    assert len(starts) <= P.window_s // P.bucket_s + 2
    assert min(int(float(s)) for s in starts) >= 3000 - P.window_s - 2 * P.bucket_s
    ttl = await redis.ttl(redis_keys.usage_bucket(shard, int(float(starts[-1]))))
    assert 0 < ttl <= P.window_s + 2 * P.bucket_s
    await history.clear(shard)


async def test_usage_is_cached_for_the_refresh_interval(redis: Redis, shard: str):
    history = UsageHistory(redis, refresh_s=60.0)
    await history.record(shard, sample(0.0, a=0), P)
    await history.record(shard, sample(10.0, a=0, b=8_000), P)
    first = await history.usage(shard, now_s=10.0)
    await history.record(shard, sample(20.0, a=8_000), P)
    assert await history.usage(shard, now_s=20.0) == first  # cached
    fresh = await history.usage(shard, now_s=20.0, fresh=True)
    assert fresh["a"]["gpu"] == pytest.approx(0.5)
    await history.clear(shard)

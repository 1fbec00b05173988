"""The maths of time-based fair share from Shoal's own allocation history (shoal.core.usage)."""

from __future__ import annotations

import pytest

from shoal.core.ingest import snapshot_from_objects
from shoal.core.ingest.config import Given, config_from
from shoal.core.model import QueueUsage
from shoal.core.usage import (
    Amounts,
    Bucket,
    Sample,
    UsageParams,
    bucket_from_fields,
    normalised_usage,
    queue_usage,
    record,
)

P = UsageParams(bucket_s=60, window_s=600)


def bucket(start: int, cap_gpu: float, **queues: float) -> Bucket:
    return Bucket(start_s=start, seconds=60, capacity=Amounts(gpu=cap_gpu * 60),
                  queues={q: Amounts(gpu=g * 60) for q, g in queues.items()})


def test_usage_is_allocation_over_capacity_in_the_window():
    history = [bucket(0, 16_000, a=8_000), bucket(60, 16_000, a=8_000, b=4_000)]
    usage = normalised_usage(history, P, now_s=120)
    assert usage["a"]["gpu"] == pytest.approx(0.5)
    assert usage["b"]["gpu"] == pytest.approx(4_000 / 32_000)  # 4 of 16 GPUs in one of the two buckets
    assert usage["a"]["cpu"] == 0.0  # no CPU capacity recorded: 0, never a division by zero


def test_sliding_window_forgets_old_buckets():
    history = [bucket(0, 16_000, a=16_000), bucket(900, 16_000, b=16_000)]
    usage = normalised_usage(history, P, now_s=960)  # window (360, 960]: only the second bucket
    assert "a" not in usage
    assert usage["b"]["gpu"] == pytest.approx(1.0)
    # the bucket straddling the window start still counts
    assert normalised_usage([bucket(300, 10, a=10)], P, now_s=920)["a"]["gpu"] == pytest.approx(1.0)
    assert normalised_usage([bucket(300, 10, a=10)], P, now_s=960) == {}


def test_tumbling_window_resets_at_each_period():
    params = UsageParams(bucket_s=60, window_s=600, window_type="tumbling", tumbling_start_s=0)
    history = [bucket(540, 10, a=10), bucket(600, 10, b=10)]
    assert set(normalised_usage(history, params, now_s=599)) == {"a"}
    assert set(normalised_usage(history, params, now_s=660)) == {"b"}  # a new window began at 600


def test_half_life_weighs_recent_buckets_more():
    params = UsageParams(bucket_s=60, window_s=3600, half_life_s=60)
    old, new = bucket(0, 10, a=10), bucket(60, 10, b=10)
    usage = normalised_usage([old, new], params, now_s=120)
    # ages to the middles are 90 s and 30 s: weights 2^-1.5 and 2^-0.5, capacity weighs both
    w_old, w_new = 0.5 ** 1.5, 0.5 ** 0.5
    assert usage["a"]["gpu"] == pytest.approx(w_old / (w_old + w_new))
    assert usage["b"]["gpu"] == pytest.approx(w_new / (w_old + w_new))
    flat = normalised_usage([old, new], UsageParams(bucket_s=60, window_s=3600), now_s=120)
    assert flat["a"]["gpu"] == pytest.approx(0.5) == flat["b"]["gpu"]


def test_recording_integrates_samples_and_ignores_repeats():
    history: dict[int, dict[str, float]] = {}
    last = None
    for at in (10.0, 20.0, 20.0, 15.0, 50.0):  # a repeat and a reordered old sample add nothing
        last = record(history, last, Sample(at_s=at, capacity=Amounts(gpu=4_000), allocated={"a": Amounts(gpu=1_000)}), P)
    assert last == 50.0
    fields = history[0]
    assert fields["seconds"] == pytest.approx(40.0)
    assert fields["cap:gpu"] == pytest.approx(4_000 * 40)
    assert fields["q:a:gpu"] == pytest.approx(1_000 * 40)
    assert normalised_usage([bucket_from_fields(0, fields)], P, now_s=50)["a"]["gpu"] == pytest.approx(0.25)


def test_a_long_gap_counts_at_most_one_bucket_and_samples_land_in_their_bucket():
    history: dict[int, dict[str, float]] = {}
    last = record(history, None, Sample(at_s=0, capacity=Amounts(gpu=1), allocated={}), P)
    last = record(history, last, Sample(at_s=500, capacity=Amounts(gpu=1), allocated={"a": Amounts(gpu=1)}), P)
    assert list(history) == [480]
    assert history[480]["seconds"] == pytest.approx(60.0)  # the service was down: the gap is not all usage


def test_trimming_keeps_the_history_bounded():
    history: dict[int, dict[str, float]] = {}
    last = None
    for at in range(0, 6000, 30):
        last = record(history, last, Sample(at_s=at, capacity=Amounts(gpu=1), allocated={"a": Amounts(gpu=1)}), P)
    assert len(history) <= P.window_s // P.bucket_s + 2
    assert min(history) >= 6000 - P.window_s - 2 * P.bucket_s


def test_params_are_checked():
    assert UsageParams().problems() == []
    bad = UsageParams(bucket_s=0, window_s=-1, half_life_s=-5, window_type="cron")
    assert len(bad.problems()) == 4


def test_usage_goes_into_the_scheduler_config_and_the_operator_override_wins():
    usage = {"a": {"gpu": 0.5, "cpu": 0.0, "memory": 0.0}, "idle": {"gpu": 0.0, "cpu": 0.0, "memory": 0.0},
             "b": {"gpu": 1.5, "cpu": 0.1234567}}
    assert queue_usage({}) == ()
    assert queue_usage(usage) == (QueueUsage(queue="a", gpu=0.5), QueueUsage(queue="b", gpu=1.0, cpu=0.123457))
    assert config_from(None, Given(usage=queue_usage(usage)))[0].usage == queue_usage(usage)
    doc = {"apiVersion": "shoal.io/v1alpha1", "spec": {"kValue": 2, "usage": {"a": {"gpu": 0.1}}}}
    shard, _ = config_from(doc, Given(usage=queue_usage(usage)))
    assert shard.usage == (QueueUsage(queue="a", gpu=0.1), QueueUsage(queue="b", gpu=1.0, cpu=0.123457))
    assert shard.k_value == 2 and doc["spec"]["usage"] == {"a": {"gpu": 0.1}}  # the document is not modified


def _s38_objects() -> list[dict]:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
            "status": {"allocatable": {"nvidia.com/gpu": "16", "cpu": "64", "memory": "256Gi", "pods": "110"}}}
    out: list[dict] = [node]
    for q in ("a", "b"):
        out.append({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": q},
                    "spec": {"resources": {"gpu": {"quota": 0, "limit": -1, "overQuotaWeight": 1}}}})
        for i in range(16):
            out.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{q}-{i}", "namespace": "ns", "labels": {"kai.scheduler/queue": q}},
                "spec": {"schedulerName": "shoal-scheduler", "containers": [
                    {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    return out


def test_recorded_usage_changes_the_fair_share_as_in_s38():
    from shoal.core.context import Context
    from shoal.core.cycle import queue_figures
    from shoal.core.session import Session

    def shares(given):
        result = snapshot_from_objects(_s38_objects(), now=0, revision=1, given=given)
        return {q.name: q.gpu.fair_share // 1000 for q in queue_figures(Context(Session(result.snapshot)))}

    history = [bucket(0, 16_000, a=8_000)]  # A used half the shard's GPUs over the window, B nothing
    usage = normalised_usage(history, P, now_s=60)
    assert shares(Given(usage=queue_usage(usage))) == {"a": 5, "b": 11}
    assert shares(Given()) == {"a": 8, "b": 8}

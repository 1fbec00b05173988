"""Prometheus as an optional source of historical usage (reference §3.5; Shoal's default is its own history).

    source = PrometheusUsage(http_url, params, allocation_query=…, capacity_query=…)
    usage = await source.usage("pool-a", now_s=time.time())     # {"team-a": {"gpu": 0.4, ...}}
    await source.close()

Per resource it asks `/api/v1/query_range` over the window (`step` = the bucket size) for the allocation per
queue and for the capacity, turns each point into `value · step` in its time bucket, and hands the buckets to
the same pure maths as the Redis history (`shoal.core.usage.normalised_usage`: window type, half-life). That is
KAI's `sum_over_time(allocation) / sum_over_time(capacity)`, with the half-life weights applied client-side.

The queries are templates with `$shard` and `$resource` (gpu, cpu, memory); the allocation query must return one
series per queue with a `queue` label. The defaults read Shoal's own metrics from the fairshare service
(`shoal_queue_allocated`, `shoal_shard_capacity`: GPUs, CPU cores, memory bytes), so both are in the same units.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from string import Template

import aiohttp

from shoal.core.usage import (
    RESOURCES,
    Amounts,
    Bucket,
    UsageParams,
    bucket_start,
    normalised_usage,
    window_start,
)
from shoal.errors import PermanentError, TransientError
from shoal.retry import RetryPolicy, retry_transient

ALLOCATION_QUERY = 'sum by (queue) (shoal_queue_allocated{shard="$shard",resource="$resource"})'
CAPACITY_QUERY = 'sum(shoal_shard_capacity{shard="$shard",resource="$resource"})'
PROMETHEUS_RETRY = RetryPolicy(attempts=3, initial_s=0.2, max_backoff_s=2.0, max_elapsed_s=15.0)


def _points(result: list, label: str | None) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for series in result:
        key = str((series.get("metric") or {}).get(label, "")) if label else ""
        if label and not key:
            continue
        points = out.setdefault(key, [])
        for ts, value in series.get("values") or ():
            try:
                points.append((float(ts), float(value)))
            except (TypeError, ValueError):
                continue
    return out


def buckets_from_series(capacity: dict[str, list[tuple[float, float]]],
                        allocation: dict[str, dict[str, list[tuple[float, float]]]], params: UsageParams,
                        step_s: float) -> list[Bucket]:
    """Buckets from range-query points: each point stands for `step_s` seconds. `capacity` maps resource →
    points, `allocation` resource → queue → points."""
    cap: dict[int, dict[str, float]] = {}
    seconds: dict[int, float] = {}
    for ts, _ in capacity.get("gpu") or next(iter(capacity.values()), []):
        start = bucket_start(ts, params)
        seconds[start] = seconds.get(start, 0.0) + step_s
    for resource, points in capacity.items():
        for ts, value in points:
            row = cap.setdefault(bucket_start(ts, params), {})
            row[resource] = row.get(resource, 0.0) + value * step_s
    used: dict[int, dict[str, dict[str, float]]] = {}
    for resource, by_queue in allocation.items():
        for queue, points in by_queue.items():
            for ts, value in points:
                row = used.setdefault(bucket_start(ts, params), {}).setdefault(queue, {})
                row[resource] = row.get(resource, 0.0) + value * step_s
    starts = sorted(set(cap) | set(used))
    return [Bucket(start_s=s, seconds=seconds.get(s, 0.0), capacity=Amounts(**cap.get(s, {})),
                   queues={q: Amounts(**v) for q, v in used.get(s, {}).items()}) for s in starts]


@dataclass
class PrometheusUsage:
    url: str
    params: UsageParams
    allocation_query: str = ALLOCATION_QUERY
    capacity_query: str = CAPACITY_QUERY
    timeout_s: float = 10.0
    refresh_s: float = 60.0  # KAI's fetchInterval default 1m
    _session: aiohttp.ClientSession | None = None
    _cache: dict[str, tuple[float, dict[str, dict[str, float]]]] = field(default_factory=dict)

    async def _range(self, query: str, start: float, end: float, step: float) -> list:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        session = self._session

        async def once() -> list:
            try:
                async with session.get(self.url.rstrip("/") + "/api/v1/query_range",
                                       params={"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                               "step": f"{step:g}"}) as resp:
                    body = await resp.json(content_type=None)
                    if resp.status == 429 or resp.status >= 500:
                        raise TransientError(f"prometheus: {resp.status} {body.get('error', '')}", status=resp.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise TransientError(f"prometheus: {type(exc).__name__}: {exc}") from exc
            except ValueError as exc:
                raise PermanentError(f"prometheus: not a JSON answer: {exc}") from exc
            if body.get("status") != "success":
                raise PermanentError(f"prometheus: {body.get('errorType', '')} {body.get('error', '')}: {query}")
            return list((body.get("data") or {}).get("result") or [])

        return await retry_transient(once, policy=PROMETHEUS_RETRY, what="prometheus_query_range")

    async def usage(self, shard: str, *, now_s: float, fresh: bool = False) -> dict[str, dict[str, float]]:
        cached = self._cache.get(shard)
        if not fresh and cached is not None and time.monotonic() - cached[0] < self.refresh_s:
            return cached[1]
        step = float(self.params.bucket_s)
        start = max(window_start(self.params, now_s), 0.0)
        capacity: dict[str, list[tuple[float, float]]] = {}
        allocation: dict[str, dict[str, list[tuple[float, float]]]] = {}
        for resource in RESOURCES:
            names = {"shard": shard, "resource": resource}
            cap = await self._range(Template(self.capacity_query).safe_substitute(names), start, now_s, step)
            capacity[resource] = [p for points in _points(cap, None).values() for p in points]
            alloc = await self._range(Template(self.allocation_query).safe_substitute(names), start, now_s, step)
            allocation[resource] = _points(alloc, "queue")
        usage = normalised_usage(buckets_from_series(capacity, allocation, self.params, step), self.params, now_s)
        self._cache[shard] = (time.monotonic(), usage)
        return usage

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

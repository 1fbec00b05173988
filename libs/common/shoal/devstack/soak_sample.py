"""What the soak samples while it runs: each service's RSS, Redis keys, Kafka consumer lag, in-flight leases,
and the topic reader for the decision stream.

    rss_mb(pid)                                        # VmRSS in MiB (0 when gone)
    await redis_keys(redis_url)                        # {"total": n, "lasting": n, "by_kind": {...}, ...}
    await consumer_lag(bootstrap, group_prefix)        # {group: committed-vs-end lag, summed over partitions}
    await read_topic(bootstrap, topic)                 # every record's JSON value, from the beginning

Each opens its own client and closes it, so a sample taken while Kafka or Redis is restarting fails alone
(the caller records the gap) and the next one connects again.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

TIMEOUT_S = 10.0
# keys that expire within this are bounded by their rate times their TTL (the binder's de-duplication marks: 1 h,
# superseded snapshots: 5 min); the others (no TTL, or the usage history's week) are the ones judged flat
SHORT_TTL_S = 3600


def rss_mb(pid: int) -> float:
    """Resident set size of a live process in MiB (VmRSS; 0 when it is gone)."""
    from shoal.devstack.bench_contenders import peak_rss_mb

    return peak_rss_mb(pid, "VmRSS")


async def redis_keys(redis_url: str) -> dict[str, Any]:
    """Every key by kind (`shoal:<kind>:…`), and the entries of every in-flight hash (leases)."""
    import redis.asyncio as aioredis

    from shoal.adapters import redis_keys as keys

    client = aioredis.from_url(redis_url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)
    try:
        names = [raw async for raw in client.scan_iter(match="*", count=1000)]
        ttls: list[int] = []
        for start in range(0, len(names), 500):
            pipe = client.pipeline(transaction=False)
            for name in names[start: start + 500]:
                pipe.pttl(name)
            ttls += [int(t) for t in await pipe.execute()]
        kinds: Counter[str] = Counter()
        lasting: Counter[str] = Counter()  # no TTL, or one longer than a soak: these must not pile up
        for raw, ttl in zip(names, ttls, strict=True):
            parts = raw.decode(errors="replace").split(":")
            kind = parts[1] if len(parts) > 1 and parts[0] == keys.PREFIX else "(other)"
            kinds[kind] += 1
            if ttl == -1 or ttl > SHORT_TTL_S * 1000:
                lasting[kind] += 1
        inflight = 0
        async for raw in client.scan_iter(match=keys.inflight_pattern(), count=100):
            inflight += int(await client.hlen(raw))
        return {"total": len(names), "lasting": sum(lasting.values()), "by_kind": dict(sorted(kinds.items())),
                "lasting_by_kind": dict(sorted(lasting.items())), "inflight": inflight}
    finally:
        await client.aclose()


async def inflight_entries(redis_url: str) -> list[str]:
    """`<key> <pod>` for every in-flight lease left (should be none once the cluster settled)."""
    import msgspec
    import redis.asyncio as aioredis

    from shoal.adapters import redis_keys as keys
    from shoal.messages.snapshot import InFlightBind

    decoder = msgspec.msgpack.Decoder(InFlightBind)
    client = aioredis.from_url(redis_url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)
    try:
        out = []
        async for raw in client.scan_iter(match=keys.inflight_pattern(), count=100):
            for value in (await client.hgetall(raw)).values():
                out.append(f"{raw.decode()} {decoder.decode(value).pod}")
        return sorted(out)
    finally:
        await client.aclose()


async def consumer_lag(bootstrap: str, group_prefix: str) -> dict[str, int]:
    """Per consumer group whose id starts with `group_prefix`: end offsets minus committed offsets, summed
    over the partitions it committed on (a partition never committed counts from its start)."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(TIMEOUT_S * 1000))
    consumer = None
    try:
        await admin.start()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    request_timeout_ms=int(TIMEOUT_S * 1000))
        await consumer.start()
        groups = [g[0] for g in await admin.list_consumer_groups() if str(g[0]).startswith(group_prefix)]
        out: dict[str, int] = {}
        for group in sorted(groups):
            committed = await admin.list_consumer_group_offsets(group)
            if not committed:
                continue
            ends = await consumer.end_offsets(list(committed))
            out[group] = sum(max(0, ends[tp] - max(0, meta.offset)) for tp, meta in committed.items())
        return out
    finally:
        if consumer is not None:
            await consumer.stop()
        await admin.close()


async def read_topic(bootstrap: str, topic: str, *, idle_polls: int = 2) -> list[dict[str, Any]]:
    """Every record of `topic` so far (JSON values), read from the beginning without a group."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    out: list[dict[str, Any]] = []
    try:
        idle = 0
        while idle < idle_polls:
            batch = await consumer.getmany(timeout_ms=1000)
            idle = 0 if batch else idle + 1
            for records in batch.values():
                for record in records:
                    try:
                        out.append(json.loads(record.value))
                    except (TypeError, ValueError):
                        continue
    finally:
        await consumer.stop()
    return out


async def bounded(coro: Any, timeout_s: float = 2 * TIMEOUT_S) -> Any:
    """`await coro` within `timeout_s`; None (a gap in the series) when it fails or takes longer."""
    try:
        return await asyncio.wait_for(coro, timeout_s)
    except Exception:  # noqa: BLE001 - a sample during a fault may fail any way; the gap is recorded
        return None

"""Every Kafka consumer of the running services fed hostile records on its real topic: the planner and fairshare
(shoal.snapshots.v1), the binder (shoal.plans.v1) and the api's decision tail (shoal.decisions.v1). Random bytes,
truncated JSON, JSON nested deep (which ended a consumer loop before), valid JSON of the wrong type, a future `type` tag and a missing
field are dead-lettered to `<topic>.dlq` by each group with a `kafka_message_dead_lettered` log line (the api,
an observer without a group, skips them with `decision_unreadable`); the services stay up, the good records
after the bad ones are handled and each group's committed offset moves past all of them.

The records use a shard no test has (`pool-fuzz-…`), so the other tests sharing the services see nothing; the
api here is one of this module's own, on a decision topic of its own (the other tests read the shared decision
topic from the start and check every event against its JSON Schema).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import msgspec
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition
from e2e_helpers import api_service, eventually

from shoal.adapters.kafka import Publisher, dlq_topic
from shoal.core.plan import Bind
from shoal.messages import topics
from shoal.messages.base import new_meta
from shoal.messages.decisions import decision
from shoal.messages.plan import PlanIssued
from shoal.messages.snapshot import SnapshotPublished
from shoal.settings import KafkaSettings


def hostile(whole: bytes, doc: dict) -> list[bytes]:
    """The bad records of one message type: none of them decodes into it."""
    rng = random.Random(15)
    return [rng.randbytes(40), rng.randbytes(300), whole[: len(whole) // 2], whole[:-1], b"[" * 100_000,
            whole[:-1] + b', "extra": ' + b"[" * 5000 + b"]" * 5000 + b"}", b'{"meta":' * 50_000, b"[1, 2]",
            b"null", json.dumps({**doc, "type": doc["type"] + "_v9"}).encode(),
            json.dumps({k: v for k, v in doc.items() if k != "shard"}).encode()]


OWN_PREFIX = f"fuzz{uuid.uuid4().hex[:6]}."  # this module's api and decision topic


@pytest.fixture(scope="module")
def api_url(shoal: Any, stack: Any) -> Iterator[str]:
    yield from api_service(shoal, stack, SHOAL_TOPIC_PREFIX=OWN_PREFIX)


async def committed(kafka: KafkaSettings, group_id: str, tp: TopicPartition) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group_id, partitions=[tp])
    finally:
        await admin.close()
    meta = offsets.get(tp)
    return meta.offset if meta is not None else -1


async def dead_letters(kafka: KafkaSettings, topic: str, key: bytes, count: int) -> dict[tuple[bytes, bytes], Any]:
    """The dead letters of `topic` with `key`, one per (group, source record), once `count` are there (a record
    redelivered after a rebalance may be dead-lettered twice)."""
    from aiokafka import AIOKafkaConsumer

    reader = AIOKafkaConsumer(dlq_topic(topic), bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest",
                              enable_auto_commit=False, group_id=None)
    await reader.start()
    out: dict[tuple[bytes, bytes], Any] = {}
    try:
        async with asyncio.timeout(60):
            while len(out) < count:
                for records in (await reader.getmany(timeout_ms=1000)).values():
                    for r in records:
                        headers = dict(r.headers)
                        if r.key == key:
                            out.setdefault((headers["shoal-dlq-group"], headers["shoal-dlq-source"]), r)
    finally:
        await reader.stop()
    return out


async def test_every_consumer_dead_letters_hostile_records_and_goes_on(shoal: Any, stack: Any,
                                                                       api_url: str) -> None:
    kafka = KafkaSettings(bootstrap=stack.kafka_bootstrap)
    shard = f"pool-fuzz-{uuid.uuid4().hex[:8]}"
    snapshot = SnapshotPublished(meta=new_meta("snapshotter", revision=1), shard=shard, revision=1, chain="fuzz")
    plan = PlanIssued(meta=new_meta("planner", revision=1, id=f"plan-{shard}"), shard=shard, plan_id=f"plan-{shard}",
                      revision=1, ops=(Bind(pod=f"{shard}/p", pod_uid="u-fuzz", node=f"{shard}-n1"),))
    snapshots, plans = topics.SNAPSHOTS.full(shoal.topic_prefix), topics.PLANS.full(shoal.topic_prefix)
    decisions = topics.DECISIONS.full(OWN_PREFIX)
    cases = {snapshots: (msgspec.json.encode(snapshot), msgspec.to_builtins(snapshot), ["shoal-planner",
                                                                                          "shoal-fairshare"]),
             plans: (msgspec.json.encode(plan), msgspec.to_builtins(plan), ["shoal-binder"])}
    after = f"{shard}/after-the-bad-ones"
    good_decision = msgspec.json.encode(decision("bind-failed", source=f"shoal/fuzz/{shard}", subject=after,
                                                 shard=shard))
    bad_decisions = [b"[" * 100_000, b"{oops", json.dumps({"id": "x", "data": [1]}).encode(),
                     json.dumps({"id": "y", "subject": ["a"], "shard": shard}).encode()]
    partitions: dict[str, TopicPartition] = {}
    ends: dict[str, int] = {}
    async with Publisher(kafka) as bus:
        for topic, (whole, doc, _) in cases.items():
            for value in hostile(whole, doc):
                await bus.publish_raw(topic, value, key=shard)
            partition, offset = await bus.publish_raw(topic, whole, key=shard)
            partitions[topic], ends[topic] = TopicPartition(topic, partition), offset + 1
        for value in [*bad_decisions, good_decision]:
            await bus.publish_raw(decisions, value, key=shard)

    for topic, (whole, doc, groups) in cases.items():
        tp, end = partitions[topic], ends[topic]
        for group in groups:
            async def moved_on(group: str = group, tp: TopicPartition = tp, end: int = end) -> bool:
                return await committed(kafka, shoal.topic_prefix + group, tp) >= end

            await eventually(moved_on, timeout_s=90, what=f"{group} committing past the hostile records on {topic}")
        letters = await dead_letters(kafka, topic, shard.encode(), len(hostile(whole, doc)) * len(groups))
        for group in groups:
            mine = [r for (g, _), r in letters.items() if g == (shoal.topic_prefix + group).encode()]
            assert [r.value for r in mine] == hostile(whole, doc), group
            assert {dict(r.headers)["shoal-dlq-reason"] for r in mine} == {b"undecodable"}
            service = group.removeprefix("shoal-")  # the group is named after its service
            assert "kafka_message_dead_lettered" in shoal.log(service)
            os.kill(shoal.pids[f"shoal-{service}"], 0)  # still running

    async def filed() -> bool:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{api_url}/v1/decisions/recent", params={"shard": shard}) as response:
                assert response.status == 200
                return after in [e["subject"] for e in (await response.json())["decisions"]]

    await eventually(filed, timeout_s=60, what="the api filing the good decision after the bad ones")
    async with aiohttp.ClientSession() as session, session.get(f"{api_url}/healthz") as response:
        assert response.status == 200
    api_logs = "".join(p.read_text(errors="replace") for p in (shoal.state_dir / "logs").glob("shoal-api-*.log"))
    assert "decision_unreadable" in api_logs and "background_task_crashed" not in api_logs

"""The shared consumer loop against a real broker, fed hostile records of a real message type
(SnapshotPublished, what the planner and fairshare consume): random bytes, truncated JSON, JSON nested deep
(a field 5,000 deep, 50,000 nested objects), valid JSON of the wrong type, a future `type` tag, a missing field, an empty record. Each goes to
`<topic>.dlq` with its reason and error (SPEC §8), the loop never ends or stalls, messages with unknown extra
fields or a later schema field are handled, the good message after the bad ones is handled, and the group's
committed offset reaches the end of the partition.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import msgspec
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from shoal.adapters.kafka import Consumer, Delivery, Publisher, dlq_topic, ensure_topics
from shoal.messages.base import new_meta
from shoal.messages.snapshot import SnapshotPublished
from shoal.settings import KafkaSettings
from tests.integration import test_kafka_bus as bus_tests
from tests.integration.test_kafka_bus import collector, read_all, running, until

kafka, group = bus_tests.kafka, bus_tests.group  # the bus tests' fixtures: the stack's broker, a group per test

SNAPSHOT = SnapshotPublished(meta=new_meta("snapshotter", revision=3), shard="pool-a", revision=3, chain="c1")
WHOLE = msgspec.json.encode(SNAPSHOT)
DOC = msgspec.to_builtins(SNAPSHOT)
_random = random.Random(15)

BAD: list[bytes | None] = [
    *(_random.randbytes(n) for n in (1, 7, 64, 500)),
    *(WHOLE[:cut] for cut in (1, len(WHOLE) // 2, len(WHOLE) - 1)),
    b"[" * 100_000,
    WHOLE[:-1] + b', "extra": ' + b"[" * 5000 + b"]" * 5000 + b"}",  # a field nested deep: RecursionError, which
    b'{"meta":' * 50_000,  # ended the consumer loop before (it was not caught as a decode error)
    b"[1, 2]", b'"snapshot"', b"null", b"1e400",
    json.dumps({**DOC, "type": "snapshot_published_v2"}).encode(),  # a future version's tag
    json.dumps({k: v for k, v in DOC.items() if k != "shard"}).encode(),  # a required field missing
    json.dumps({**DOC, "revision": "three"}).encode(),
    None,  # an empty record (tombstone)
]
GOOD = [
    json.dumps({**DOC, "meta": {**DOC["meta"], "id": "extra"}, "zone": "eu", "extra": {"a": [1]}}).encode(),
    json.dumps({**DOC, "meta": {**DOC["meta"], "id": "later"}, "schema": 2, "priority": 7}).encode(),
]
LAST = msgspec.json.encode(msgspec.structs.replace(SNAPSHOT, meta=new_meta("snapshotter", id="last")))


async def committed(kafka: KafkaSettings, group_id: str) -> dict[TopicPartition, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group_id)
    finally:
        await admin.close()
    return {tp: meta.offset for tp, meta in offsets.items()}


async def test_hostile_records_are_dead_lettered_and_the_loop_goes_on(kafka: KafkaSettings, topic_prefix: str,
                                                                     group: str) -> None:
    topic = f"{topic_prefix}snapshots.v1"
    await ensure_topics(kafka, [topic], partitions=1)
    got: list[tuple[Any, Delivery]] = []
    records = [*BAD[:9], GOOD[0], *BAD[9:], GOOD[1], LAST]
    async with Publisher(kafka) as bus:
        for value in records:
            await bus.publish_raw(topic, value, key="pool-a")
        consumer = Consumer(kafka, [topic], group_id=group, message_type=SnapshotPublished,
                            handler=collector(got), dlq=bus)
        async with running(consumer):  # a crash of the loop fails here
            await until(lambda: len(got) == 3)
            assert consumer.ready()

    assert [m.meta.id for m, _ in got] == ["extra", "later", "last"]
    dead = await read_all(kafka, dlq_topic(topic), len(BAD))
    assert [r.value for r in dead] == [value or b"" for value in BAD]
    assert {dict(r.headers)["shoal-dlq-reason"] for r in dead} == {b"undecodable"}
    errors = [dict(r.headers)["shoal-dlq-error"] for r in dead]
    assert errors[BAD.index(b'{"meta":' * 50_000)].startswith(b"RecursionError: ")
    assert all(e.split(b":")[0] in (b"DecodeError", b"ValidationError", b"RecursionError") for e in errors)
    offsets = await committed(kafka, group)
    assert offsets[TopicPartition(topic, 0)] == len(records)  # committed past every record


async def test_a_flood_of_random_records_does_not_stall_the_loop(kafka: KafkaSettings, topic_prefix: str,
                                                               group: str) -> None:
    topic = f"{topic_prefix}snapshots.v1"
    await ensure_topics(kafka, [topic], partitions=2)
    rng = random.Random(7)
    flood = [rng.randbytes(rng.randint(0, 300)) for _ in range(150)]
    got: list[tuple[Any, Delivery]] = []
    async with Publisher(kafka) as bus:
        await asyncio.gather(*(bus.publish_raw(topic, value, key=f"pool-{i % 2}") for i, value in enumerate(flood)))
        await bus.publish_raw(topic, LAST, key="pool-0")
        await bus.publish_raw(topic, LAST, key="pool-1")
        consumer = Consumer(kafka, [topic], group_id=group, message_type=SnapshotPublished,
                            handler=collector(got), dlq=bus)
        async with running(consumer):
            await until(lambda: len(got) == 2, timeout=60)
    assert [m.meta.id for m, _ in got] == ["last", "last"]
    assert len(await read_all(kafka, dlq_topic(topic), len(flood))) == len(flood)

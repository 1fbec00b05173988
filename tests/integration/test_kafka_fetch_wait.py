"""A consumer's fetch waits against a real broker: long while it asks for every partition (the next record of
any ends the wait), short while one partition's records are still in hand (`shoal.adapters.kafka_fetch`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from shoal.adapters.kafka import Consumer, Delivery, Publisher, ensure_topics
from shoal.adapters.kafka_fetch import WAIT_ATTRIBUTE, asked_partitions
from shoal.settings import KafkaSettings
from tests.integration.test_kafka_bus import until

PARTITIONS = 4


class Tick(msgspec.Struct, frozen=True):
    seq: int


@pytest.fixture
def kafka(stack: Any) -> KafkaSettings:
    return KafkaSettings(bootstrap=stack.kafka_bootstrap, session_timeout_ms=6000, heartbeat_interval_ms=500,
                         fetch_max_wait_ms=50, idle_fetch_wait_ms=20_000)


def record_fetches(consumer: Consumer[Any], into: list[tuple[int, int]]) -> None:
    """Note (partitions asked, wait in ms) of every fetch request the consumer's fetcher builds."""
    fetcher = consumer._consumer._fetcher  # type: ignore[union-attr]
    actions = fetcher._get_actions_per_node

    def noted(assignment: Any) -> Any:
        found = actions(assignment)
        into.extend((asked_partitions([(node, request)]), getattr(request, WAIT_ATTRIBUTE))
                    for node, request in found[0])
        return found

    fetcher._get_actions_per_node = noted


@contextlib.asynccontextmanager
async def running(consumer: Consumer[Any], fetches: list[tuple[int, int]]) -> AsyncIterator[None]:
    await consumer.start()
    record_fetches(consumer, fetches)
    task = asyncio.create_task(consumer.run())
    try:
        yield
    finally:
        await consumer.stop()
        await task


async def test_an_idle_consumer_waits_long_and_the_next_record_ends_the_wait(kafka: KafkaSettings,
                                                                              topic_prefix: str) -> None:
    topic = f"{topic_prefix}ticks.v1"
    await ensure_topics(kafka, [topic], partitions=PARTITIONS)
    got: list[int] = []
    fetches: list[tuple[int, int]] = []

    async def handle(message: Tick, delivery: Delivery) -> None:
        got.append(message.seq)

    consumer = Consumer(kafka, [topic], group_id=f"{topic_prefix}g1", message_type=Tick, handler=handle)
    async with Publisher(kafka) as bus, running(consumer, fetches):
        # assigned and every partition's leader known (a fetch before that leaves some out, and stays short):
        # a fetch for all of them is at the broker
        await until(lambda: (PARTITIONS, 20_000) in fetches)
        await asyncio.sleep(1.0)
        idle = fetches[fetches.index((PARTITIONS, 20_000)):]
        await bus.publish(topic, Tick(seq=1), key="pool-a")
        # the broker holds that fetch for up to 20 s; the record ends it long before
        await until(lambda: got == [1], timeout=10)

    assert all(fetch == (PARTITIONS, 20_000) for fetch in idle), idle
    assert len(idle) <= 2  # one fetch held at the broker, not one every 50 ms


async def test_a_fetch_that_leaves_a_partition_out_keeps_the_short_wait(kafka: KafkaSettings,
                                                                         topic_prefix: str) -> None:
    topic = f"{topic_prefix}ticks.v1"
    await ensure_topics(kafka, [topic], partitions=PARTITIONS)
    release = asyncio.Event()
    got: list[int] = []
    fetches: list[tuple[int, int]] = []

    async def handle(message: Tick, delivery: Delivery) -> None:
        await release.wait()  # the records after the first one stay in the fetcher's hands meanwhile
        got.append(message.seq)

    count = 300  # more than one getmany takes (max_records=100)
    consumer = Consumer(kafka, [topic], group_id=f"{topic_prefix}g2", message_type=Tick, handler=handle)
    async with Publisher(kafka) as bus:
        for seq in range(count):
            await bus.publish(topic, Tick(seq=seq), key="pool-a")
        async with running(consumer, fetches):
            await until(lambda: any(asked < PARTITIONS for asked, _ in fetches))
            release.set()
            await until(lambda: len(got) == count)

    partial = [wait for asked, wait in fetches if asked < PARTITIONS]
    assert partial and set(partial) == {50}, fetches
    assert got == list(range(count))


async def test_an_idle_wait_not_above_the_short_one_leaves_every_fetch_at_the_short_one(
        kafka: KafkaSettings, topic_prefix: str) -> None:
    topic = f"{topic_prefix}ticks.v1"
    await ensure_topics(kafka, [topic], partitions=PARTITIONS)
    raised = msgspec.structs.replace(kafka, fetch_max_wait_ms=800, idle_fetch_wait_ms=500)
    fetches: list[tuple[int, int]] = []

    async def handle(message: Tick, delivery: Delivery) -> None:
        pass

    consumer = Consumer(raised, [topic], group_id=f"{topic_prefix}g3", message_type=Tick, handler=handle)
    async with running(consumer, fetches):
        await until(lambda: len(fetches) >= 2)
    assert {wait for _, wait in fetches} == {800}

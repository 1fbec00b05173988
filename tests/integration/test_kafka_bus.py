"""The Kafka bus against a real broker: round trip, dead letters, resume from committed offsets, redelivery."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from shoal.adapters.kafka import Consumer, Delivery, Publisher, dlq_topic, ensure_topics
from shoal.errors import PermanentError, TransientError
from shoal.retry import RetryPolicy
from shoal.settings import KafkaSettings


class Base(msgspec.Struct, frozen=True, tag_field="type"):
    id: str


class Ping(Base, frozen=True, tag="ping"):
    seq: int
    shard: str = "pool-a"


class Pong(Base, frozen=True, tag="pong"):
    note: str


Message = Ping | Pong

FAST_RETRY = RetryPolicy(attempts=2, initial_s=0.01, max_backoff_s=0.05, max_elapsed_s=5)


@pytest.fixture
def kafka(stack: Any) -> KafkaSettings:
    return KafkaSettings(bootstrap=stack.kafka_bootstrap, session_timeout_ms=6000, heartbeat_interval_ms=500)


@pytest.fixture
def group(topic_prefix: str) -> str:
    return f"{topic_prefix}group"


@contextlib.asynccontextmanager
async def running(consumer: Consumer[Any]) -> AsyncIterator[Consumer[Any]]:
    """Start the consumer, run its loop in a task, stop it at the end (and surface a crash of the loop)."""
    await consumer.start()
    task = asyncio.create_task(consumer.run())
    try:
        yield consumer
    finally:
        await consumer.stop()
        await task


async def until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)


def collector(into: list[Any]) -> Callable[[Any, Delivery], Awaitable[None]]:
    async def handle(message: Any, delivery: Delivery) -> None:
        into.append((message, delivery))

    return handle


async def read_all(kafka: KafkaSettings, topic: str, count: int) -> list[Any]:
    """Read `count` raw records from the start of `topic` with a plain aiokafka consumer."""
    reader = AIOKafkaConsumer(topic, bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest",
                              enable_auto_commit=False)
    await reader.start()
    records: list[Any] = []
    try:
        async with asyncio.timeout(30):
            while len(records) < count:
                for batch in (await reader.getmany(timeout_ms=500)).values():
                    records.extend(batch)
    finally:
        await reader.stop()
    return records


async def test_round_trip_of_a_tagged_union_keyed_by_shard(kafka: KafkaSettings, topic_prefix: str,
                                                         group: str) -> None:
    topic = f"{topic_prefix}pings.v1"
    created = await ensure_topics(kafka, [topic], partitions=3)
    assert set(created) == {topic, dlq_topic(topic)}
    assert await ensure_topics(kafka, [topic], partitions=3) == []  # TOPIC_ALREADY_EXISTS is fine

    got: list[tuple[Any, Delivery]] = []
    sent = [Ping(id=f"m{i}", seq=i, shard=f"pool-{i % 2}") for i in range(6)] + [Pong(id="p", note="hi")]
    async with Publisher(kafka) as bus:
        for message in sent:
            await bus.publish(topic, message, key=getattr(message, "shard", "pool-0"),
                              headers={"trace": message.id})
        consumer = Consumer(kafka, [topic], group_id=group, message_type=Message, handler=collector(got), dlq=bus)
        async with running(consumer):
            await until(lambda: len(got) == len(sent))

    assert sorted(m.id for m, _ in got) == sorted(m.id for m in sent)
    assert {type(m) for m, _ in got} == {Ping, Pong}
    partitions_by_shard: dict[str, set[int]] = {}
    for message, delivery in got:
        assert (("trace", message.id.encode()) in delivery.headers)
        if isinstance(message, Ping):
            partitions_by_shard.setdefault(message.shard, set()).add(delivery.partition)
            assert delivery.key == message.shard.encode()
    assert all(len(parts) == 1 for parts in partitions_by_shard.values())  # one partition per shard
    in_order = [m.seq for m, _ in got if isinstance(m, Ping) and m.shard == "pool-0"]
    assert in_order == sorted(in_order)


async def test_undecodable_messages_go_to_the_dead_letter_topic(kafka: KafkaSettings, topic_prefix: str,
                                                                group: str) -> None:
    topic = f"{topic_prefix}pings.v1"
    await ensure_topics(kafka, [topic])
    got: list[tuple[Any, Delivery]] = []
    async with Publisher(kafka) as bus:
        await bus.publish_raw(topic, b"\x00not json", key="pool-a", headers={"origin": "test"})
        await bus.publish_raw(topic, b'{"type": "ping", "id": "x", "seq": "NaN"}', key="pool-a")
        await bus.publish(topic, Ping(id="good", seq=1), key="pool-a")
        consumer = Consumer(kafka, [topic], group_id=group, message_type=Message, handler=collector(got))
        async with running(consumer):
            await until(lambda: len(got) == 1)

    assert got[0][0] == Ping(id="good", seq=1)
    dead = await read_all(kafka, dlq_topic(topic), 2)
    assert [r.value for r in dead] == [b"\x00not json", b'{"type": "ping", "id": "x", "seq": "NaN"}']
    first = dict(dead[0].headers)
    assert dead[0].key == b"pool-a"
    assert first["origin"] == b"test"
    assert first["shoal-dlq-reason"] == b"undecodable"
    assert first["shoal-dlq-source"] == f"{topic}/0/0".encode()
    assert b"DecodeError" in first["shoal-dlq-error"]
    assert b"ValidationError" in dict(dead[1].headers)["shoal-dlq-error"]

    # the loop moved past them: a fresh member of the group sees nothing left
    again: list[Any] = []
    async with running(Consumer(kafka, [topic], group_id=group, message_type=Message,
                                handler=collector(again))):
        await asyncio.sleep(3)
    assert again == []


async def test_restarted_consumer_resumes_from_its_committed_offset(kafka: KafkaSettings, topic_prefix: str,
                                                                    group: str) -> None:
    topic = f"{topic_prefix}pings.v1"
    await ensure_topics(kafka, [topic], partitions=2)
    first: list[tuple[Any, Delivery]] = []
    second: list[tuple[Any, Delivery]] = []
    async with Publisher(kafka) as bus:
        for i in range(10):
            await bus.publish(topic, Ping(id=f"a{i}", seq=i, shard=f"pool-{i % 2}"), key=f"pool-{i % 2}")
        async with running(Consumer(kafka, [topic], group_id=group, message_type=Message,
                                    handler=collector(first))):
            await until(lambda: len(first) == 10)
        for i in range(10, 20):
            await bus.publish(topic, Ping(id=f"a{i}", seq=i, shard=f"pool-{i % 2}"), key=f"pool-{i % 2}")
        async with running(Consumer(kafka, [topic], group_id=group, message_type=Message,
                                    handler=collector(second))):
            await until(lambda: len(second) == 10)
            await asyncio.sleep(1.5)  # nothing more arrives

    assert sorted(m.seq for m, _ in first) == list(range(10))
    assert sorted(m.seq for m, _ in second) == list(range(10, 20))  # nothing lost, nothing redelivered


async def test_failed_handler_is_not_committed_and_the_message_is_redelivered(
        kafka: KafkaSettings, topic_prefix: str, group: str) -> None:
    topic = f"{topic_prefix}pings.v1"
    await ensure_topics(kafka, [topic])
    calls: list[int] = []
    done: list[int] = []

    async def flaky(message: Any, delivery: Delivery) -> None:
        calls.append(message.seq)
        if message.seq == 1 and calls.count(1) <= 3:  # beyond the in-place retries: rewound, redelivered
            raise TransientError("downstream unavailable")
        done.append(message.seq)

    async with Publisher(kafka) as bus:
        for i in range(3):
            await bus.publish(topic, Ping(id=f"b{i}", seq=i), key="pool-a")
        consumer = Consumer(kafka, [topic], group_id=group, message_type=Message, handler=flaky,
                            retry=FAST_RETRY, redelivery_backoff_s=0.2)
        async with running(consumer):
            await until(lambda: done == [0, 1, 2])
    assert calls.count(1) == 4 and calls.count(2) == 1  # order kept: 2 waited for 1

    # a consumer that stops while its handler keeps failing commits nothing past the failure
    topic2 = f"{topic_prefix}pongs.v1"
    await ensure_topics(kafka, [topic2])
    seen: list[str] = []

    async def always_down(message: Any, delivery: Delivery) -> None:
        seen.append(message.id)
        raise ConnectionError("still down")

    async with Publisher(kafka) as bus:
        await bus.publish(topic2, Pong(id="c0", note="x"), key="pool-a")
        await bus.publish(topic2, Pong(id="c1", note="y"), key="pool-a")
        async with running(Consumer(kafka, [topic2], group_id=group, message_type=Message, handler=always_down,
                                    retry=FAST_RETRY, redelivery_backoff_s=0.2)):
            await until(lambda: len(seen) >= 2)
    assert set(seen) == {"c0"}

    again: list[tuple[Any, Delivery]] = []
    async with running(Consumer(kafka, [topic2], group_id=group, message_type=Message,
                                handler=collector(again))):
        await until(lambda: len(again) == 2)
    assert [m.id for m, _ in again] == ["c0", "c1"]


async def test_permanent_handler_errors_are_dead_lettered_and_the_loop_goes_on(
        kafka: KafkaSettings, topic_prefix: str, group: str) -> None:
    topic = f"{topic_prefix}pings.v1"
    await ensure_topics(kafka, [topic])
    done: list[int] = []

    async def picky(message: Any, delivery: Delivery) -> None:
        if message.seq == 0:
            raise PermanentError("queue does not exist")
        if message.seq == 1:
            raise KeyError("bug triggered by this message")
        done.append(message.seq)

    async with Publisher(kafka) as bus:
        for i in range(3):
            await bus.publish(topic, Ping(id=str(uuid.uuid4()), seq=i), key="pool-a")
        async with running(Consumer(kafka, [topic], group_id=group, message_type=Message, handler=picky,
                                    retry=FAST_RETRY)):
            await until(lambda: done == [2])
    dead = await read_all(kafka, dlq_topic(topic), 2)
    reasons = [dict(r.headers)["shoal-dlq-reason"] for r in dead]
    assert reasons == [b"handler_failed", b"handler_failed"]
    assert b"queue does not exist" in dict(dead[0].headers)["shoal-dlq-error"]
    assert b"KeyError" in dict(dead[1].headers)["shoal-dlq-error"]


async def test_a_member_leaving_hands_its_partitions_over_without_loss_or_duplicates(
        kafka: KafkaSettings, topic_prefix: str, group: str) -> None:
    topic = f"{topic_prefix}pings.v1"
    await ensure_topics(kafka, [topic], partitions=4)
    handled: list[tuple[str, int]] = []

    def slow(member: str) -> Callable[[Any, Delivery], Awaitable[None]]:
        async def handle(message: Any, delivery: Delivery) -> None:
            await asyncio.sleep(0.02)
            handled.append((member, message.seq))
        return handle

    total = 200
    async with Publisher(kafka) as bus:
        for i in range(total):
            await bus.publish(topic, Ping(id=f"r{i}", seq=i, shard=f"pool-{i % 8}"), key=f"pool-{i % 8}")
        a = Consumer(kafka, [topic], group_id=group, message_type=Message, handler=slow("a"))
        b = Consumer(kafka, [topic], group_id=group, message_type=Message, handler=slow("b"))
        async with running(a):
            await until(lambda: len(handled) >= 20)
            async with running(b):  # joins: partitions are revoked from a and split between both
                await until(lambda: any(m == "b" for m, _ in handled))
                await until(lambda: len(handled) >= 120)
            # b leaves mid-stream: its partitions go back to a, which finishes the rest
            await until(lambda: len({seq for _, seq in handled}) == total, timeout=60)
        await asyncio.sleep(0.5)

    seqs = [seq for _, seq in handled]
    assert sorted(set(seqs)) == list(range(total))  # nothing lost
    assert len(seqs) == total  # and, with graceful hand-overs, nothing handled twice
    assert {m for m, _ in handled} == {"a", "b"}


async def test_the_consumer_asks_the_broker_for_short_fetch_waits(kafka: KafkaSettings, topic_prefix: str,
                                                                  group: str) -> None:
    """With one partition's records in hand the client fetches the other partitions alone, and that
    partition's next records wait until the broker answers: its fetch wait bounds how late a plan arrives
    behind a busy handler (the client's default, 500 ms, delayed plans by up to half a second)."""
    topic = f"{topic_prefix}waits.v1"
    await ensure_topics(kafka, [topic], partitions=2)
    assert KafkaSettings().fetch_max_wait_ms <= 100
    settings = msgspec.structs.replace(kafka, fetch_max_wait_ms=40)
    consumer = Consumer(settings, [topic], group_id=group, message_type=Message, handler=collector([]))
    async with running(consumer):
        fetcher = consumer._consumer._fetcher  # type: ignore[union-attr]
        assert fetcher._fetch_max_wait_ms == 40


@pytest.mark.parametrize("interval_ms", [0, 60_000])
async def test_done_offsets_are_committed_at_most_once_per_interval_and_all_of_them_on_stop(
        kafka: KafkaSettings, topic_prefix: str, group: str, interval_ms: int) -> None:
    """A commit is a round trip the consume loop waits for: with `commit_interval_ms` the loop commits at most
    once per interval (0: after every batch), so a message handled within the interval of the last commit stays
    uncommitted while the consumer runs, and a stop commits it."""
    topic = f"{topic_prefix}interval{interval_ms}.v1"
    await ensure_topics(kafka, [topic], partitions=1)
    assert 0 < KafkaSettings().commit_interval_ms <= 1000  # a crash redelivers at most this much
    partition = TopicPartition(topic, 0)
    got: list[tuple[Any, Delivery]] = []
    consumer = Consumer(msgspec.structs.replace(kafka, commit_interval_ms=interval_ms), [topic], group_id=group,
                        message_type=Message, handler=collector(got))

    async def committed() -> int | None:
        return await consumer._consumer.committed(partition)  # type: ignore[union-attr]

    async with Publisher(kafka) as bus:
        async with running(consumer):
            await bus.publish(topic, Ping(id="c0", seq=0), key="pool-a")
            await until(lambda: len(got) == 1)
            async with asyncio.timeout(10):
                while await committed() != 1:  # the first done offset goes at once
                    await asyncio.sleep(0.05)
            await bus.publish(topic, Ping(id="c1", seq=1), key="pool-a")
            await until(lambda: len(got) == 2)
            await asyncio.sleep(0.6)  # several turns of the loop
            assert await committed() == (2 if interval_ms == 0 else 1)
        again: list[tuple[Any, Delivery]] = []
        async with running(Consumer(kafka, [topic], group_id=group, message_type=Message,
                                    handler=collector(again))):
            await asyncio.sleep(1.5)
    assert again == []  # the stop committed the second


async def test_work_left_running_counts_only_when_it_and_all_earlier_work_finished(
        kafka: KafkaSettings, topic_prefix: str, group: str) -> None:
    """`pipeline=2`: a handler returns its remaining work as a future; two messages are under way at once, a
    third starts only when the first finished; a failure of the first's work rewinds the partition to it
    (the second, finished, is redelivered too), and only work finished in order is committed."""
    topic = f"{topic_prefix}pipelined.v1"
    await ensure_topics(kafka, [topic])
    loop = asyncio.get_running_loop()
    calls: list[int] = []
    work: dict[int, asyncio.Future] = {}

    async def start(message: Any, delivery: Delivery) -> asyncio.Future:
        calls.append(message.seq)
        work[message.seq] = loop.create_future()
        return work[message.seq]

    async with Publisher(kafka) as bus:
        for i in range(4):
            await bus.publish(topic, Ping(id=f"w{i}", seq=i), key="pool-a")
        consumer = Consumer(kafka, [topic], group_id=group, message_type=Message, handler=start, pipeline=2,
                            retry=FAST_RETRY, redelivery_backoff_s=0.2)
        async with running(consumer):
            await until(lambda: calls == [0, 1])
            work[1].set_result(None)  # the second finishes first: the third still waits for the first
            await asyncio.sleep(0.6)
            assert calls == [0, 1]
            work[0].set_exception(TransientError("the apiserver went away"))
            await until(lambda: calls == [0, 1, 0, 1])  # redelivered from the failed message
            work[0].set_result(None)
            await until(lambda: calls == [0, 1, 0, 1, 2])
            for seq in (1, 3, 2):
                await until(lambda seq=seq: seq in work and calls.count(seq) == (2 if seq < 2 else 1))
                work[seq].set_result(None)
        again: list[tuple[Any, Delivery]] = []
        async with running(Consumer(kafka, [topic], group_id=group, message_type=Message,
                                    handler=collector(again))):
            await asyncio.sleep(1.5)
    assert again == []  # all four committed once their work (and all earlier work) finished


async def test_a_stopping_consumer_waits_for_work_under_way_and_commits_nothing_past_a_failure(
        kafka: KafkaSettings, topic_prefix: str, group: str) -> None:
    topic = f"{topic_prefix}pipelined.v1"
    await ensure_topics(kafka, [topic])
    loop = asyncio.get_running_loop()
    work: dict[int, asyncio.Future] = {}

    async def start(message: Any, delivery: Delivery) -> asyncio.Future:
        work[message.seq] = loop.create_future()
        return work[message.seq]

    async with Publisher(kafka) as bus:
        for i in range(3):
            await bus.publish(topic, Ping(id=f"s{i}", seq=i), key="pool-a")
        consumer = Consumer(kafka, [topic], group_id=group, message_type=Message, handler=start, pipeline=3)
        await consumer.start()
        task = asyncio.create_task(consumer.run())
        await until(lambda: sorted(work) == [0, 1, 2])
        stopping = asyncio.create_task(consumer.stop())
        await asyncio.sleep(0.3)
        assert not stopping.done()  # it waits for the work under way
        work[0].set_result(None)
        work[1].set_exception(TransientError("the apiserver went away"))
        work[2].set_result(None)
        await stopping
        await task
    again: list[tuple[Any, Delivery]] = []
    async with running(Consumer(kafka, [topic], group_id=group, message_type=Message, handler=collector(again))):
        await until(lambda: len(again) == 2)
    assert [m.seq for m, _ in again] == [1, 2]  # 0 committed; nothing past the failed 1


async def test_a_message_over_kafkas_1_mb_default_goes_through(kafka: KafkaSettings, topic_prefix: str,
                                                               group: str) -> None:
    """A plan carries all of its cycle's binds: 5,000 pods that fit at once made a 1.8 MB plan, which the
    producer refused (1 MB default) and scheduling stopped. Topics Shoal creates, its producer and its consumers
    take messages up to `max_message_bytes`."""
    topic = f"{topic_prefix}big.v1"
    await ensure_topics(kafka, [topic])
    big = Pong(id="big", note="x" * 3_000_000)
    got: list[tuple[Any, Delivery]] = []
    async with Publisher(kafka) as bus:
        await bus.publish(topic, big, key="pool-a")
        await bus.publish(topic, Ping(id="after", seq=1), key="pool-a")
        async with running(Consumer(kafka, [topic], group_id=group, message_type=Message, handler=collector(got),
                                    dlq=bus)):
            await until(lambda: len(got) == 2)
    assert [m.id for m, _ in got] == ["big", "after"] and got[0][0] == big
    small = msgspec.structs.replace(kafka, max_message_bytes=1_000_000)
    async with Publisher(small) as bus:
        with pytest.raises(PermanentError, match="MessageSizeTooLarge"):
            await bus.publish(topic, big, key="pool-a")  # the setting is what the producer holds to


async def test_thousands_of_gathered_publishes_wait_for_room_in_the_producers_buffer_once_per_batch(
        kafka: KafkaSettings, topic_prefix: str, group: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan's decisions are published together (thousands in a backlog's first plan). aiokafka holds one open
    batch per partition: when it is full, every send waiting for room wakes each time it drains, and all but the
    ~40 that fit in the next one go back to waiting (~600 µs of CPU per message for 5,000 gathered, ~35 µs once
    queued). Queued per topic, a send waits for room at most once, and they arrive in the order published."""
    from aiokafka.producer.message_accumulator import MessageBatch

    waits = [0]
    wait_drain = MessageBatch.wait_drain

    async def counted(self: MessageBatch, *args: Any, **kwargs: Any) -> Any:
        waits[0] += 1
        return await wait_drain(self, *args, **kwargs)

    monkeypatch.setattr(MessageBatch, "wait_drain", counted)
    topic = f"{topic_prefix}many.v1"
    await ensure_topics(kafka, [topic])
    n = 3000
    got: list[tuple[Any, Delivery]] = []
    async with Publisher(kafka) as bus:
        # a decision event's size: a 16 KB batch holds ~40
        await asyncio.gather(*(bus.publish(topic, Ping(id=f"m{i}-" + "d" * 400, seq=i), key="pool-a")
                               for i in range(n)))
        assert waits[0] <= n // 10, waits[0]  # one per batch filled; all gathered at once waited ~n²/80 times
        async with running(Consumer(kafka, [topic], group_id=group, message_type=Message, handler=collector(got),
                                    dlq=bus)):
            await until(lambda: len(got) == n)
    assert [m.seq for m, _ in got] == list(range(n))

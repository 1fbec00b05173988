"""Publisher replaces an idempotent producer whose sequence state the broker rejects, and sends again.

Seen for real when Kafka restarts mid-burst (tests/e2e/test_faults_kafka.py): a batch expires while the broker
is down, the producer's sequence numbers no longer match, and every later send fails with
OutOfOrderSequenceNumber; without the reset a planner or binder dead-letters every message from then on.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import msgspec
import pytest
from aiokafka.errors import KafkaConnectionError, OutOfOrderSequenceNumber

from shoal.adapters import kafka
from shoal.errors import PermanentError, TransientError
from shoal.settings import KafkaSettings


class Note(msgspec.Struct, frozen=True):
    text: str


class FakeProducer:
    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = list(failures)
        self.sent: list[bytes] = []
        self.started = self.stopped = False

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def send(self, topic: str, value: bytes, **_kw: object) -> asyncio.Future:
        """As aiokafka's: the message is in the buffer when it returns; the future is its delivery."""
        await asyncio.sleep(0)
        if self.failures:
            raise self.failures.pop(0)
        self.sent.append(value)
        delivered = asyncio.get_running_loop().create_future()
        delivered.set_result(SimpleNamespace(partition=0, offset=len(self.sent) - 1))
        return delivered


def publisher(first: FakeProducer, later: list[FakeProducer]) -> kafka.Publisher:
    pub = kafka.Publisher(KafkaSettings())
    pub._producer = first  # type: ignore[assignment]
    pub._new_producer = lambda: later.pop(0)  # type: ignore[method-assign]
    pub._started = True
    return pub


async def test_out_of_order_sequence_resets_the_producer_and_sends_again() -> None:
    broken = FakeProducer([OutOfOrderSequenceNumber()] * 5)
    fresh = FakeProducer([])
    pub = publisher(broken, [fresh])

    assert await pub.publish("t", Note("a")) == (0, 0)

    assert fresh.started and broken.stopped
    assert fresh.sent == [b'{"text":"a"}']
    assert await pub.publish("t", Note("b")) == (0, 1)


async def test_concurrent_senders_reset_once() -> None:
    broken = FakeProducer([OutOfOrderSequenceNumber()] * 3)
    fresh = FakeProducer([])
    pub = publisher(broken, [fresh])  # a second reset would find no producer to create

    await asyncio.gather(*(pub.publish("t", Note(str(i))) for i in range(3)))

    assert len(fresh.sent) == 3


async def test_a_fresh_producer_failing_the_same_way_is_a_permanent_error() -> None:
    pub = publisher(FakeProducer([OutOfOrderSequenceNumber()]), [FakeProducer([OutOfOrderSequenceNumber()])])

    with pytest.raises(PermanentError, match="OutOfOrderSequenceNumber"):
        await pub.publish("t", Note("a"))


async def test_connection_errors_are_transient_and_keep_the_producer() -> None:
    producer = FakeProducer([KafkaConnectionError("down")])
    pub = publisher(producer, [])

    with pytest.raises(TransientError):
        await pub.publish("t", Note("a"))
    assert pub._producer is producer and not producer.stopped


async def test_a_send_timed_out_while_the_broker_is_down_is_transient() -> None:
    """aiokafka's KafkaTimeoutError is not marked retriable; mapped permanent, the binder dead-lettered a plan."""
    from aiokafka.errors import KafkaTimeoutError

    pub = publisher(FakeProducer([KafkaTimeoutError()]), [])

    with pytest.raises(TransientError):
        await pub.publish("t", Note("a"))
    assert kafka.default_classify(kafka.kafka_error(KafkaTimeoutError())) == "transient"
    # the consumer classifies the cause of a TransientError once its retries are spent: redeliver, not DLQ
    assert kafka.default_classify(KafkaTimeoutError()) == "transient"


async def test_a_send_caught_by_the_reset_goes_out_on_the_fresh_producer() -> None:
    from aiokafka.errors import ProducerClosed

    closed = FakeProducer([ProducerClosed()])
    fresh = FakeProducer([])
    pub = publisher(closed, [])
    original_send = closed.send

    async def send_while_reset(topic: str, value: bytes, **kw: object) -> asyncio.Future:
        pub._producer = fresh  # type: ignore[assignment] - another send reset the producer meanwhile
        return await original_send(topic, value, **kw)

    closed.send = send_while_reset  # type: ignore[method-assign]

    assert await pub.publish("t", Note("a")) == (0, 0)
    assert fresh.sent == [b'{"text":"a"}']


async def test_gathered_publishes_enter_the_producer_one_at_a_time_in_order_and_a_failed_delivery_is_raised() -> None:
    """aiokafka wakes every send waiting for room in a batch whenever one drains (thousands gathered at once cost
    ~600 µs of CPU each): a topic's messages go into the producer one at a time, in the order they came."""
    producer = FakeProducer([])
    inside = []

    async def one_at_a_time(topic: str, value: bytes, **kw: object) -> asyncio.Future:
        inside.append(value)
        assert len(inside) == 1, "two sends in the producer at once"
        try:
            return await FakeProducer.send(producer, topic, value, **kw)
        finally:
            inside.remove(value)

    producer.send = one_at_a_time  # type: ignore[method-assign]
    pub = publisher(producer, [])
    assert await asyncio.gather(*(pub.publish("t", Note(str(i))) for i in range(50))) == [(0, i) for i in range(50)]
    assert producer.sent == [msgspec.json.encode(Note(str(i))) for i in range(50)]

    class Undelivered(FakeProducer):
        async def send(self, topic: str, value: bytes, **_kw: object) -> asyncio.Future:
            failed = asyncio.get_running_loop().create_future()
            failed.set_exception(KafkaConnectionError("broker gone"))
            return failed

    with pytest.raises(TransientError):
        await publisher(Undelivered([]), []).publish("t", Note("a"))

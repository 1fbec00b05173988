"""Which handler failures redeliver a message and which dead-letter it.

Seen for real: with four plans under way the binder's Redis pool ran out ("Too many connections", a Redis
ConnectionError raised by a direct call) and the first plan of a 1,000-pod backlog went to the dead-letter
topic; its pods waited a full lease TTL to be planned again.
"""

from __future__ import annotations

import msgspec
from aiokafka.structs import ConsumerRecord
from redis.exceptions import MaxConnectionsError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shoal.adapters.kafka import Consumer, default_classify
from shoal.errors import InvariantBroken, PermanentError, TransientError
from shoal.settings import KafkaSettings


class Note(msgspec.Struct, frozen=True):
    text: str


def test_redis_connection_trouble_is_transient_and_a_rejected_command_permanent():
    assert default_classify(MaxConnectionsError("Too many connections")) == "transient"
    assert default_classify(RedisTimeoutError("timed out")) == "transient"
    assert default_classify(ResponseError("WRONGTYPE")) == "permanent"
    assert default_classify(InvariantBroken("double booking")) == "fatal"
    assert default_classify(PermanentError("no such queue")) == "permanent"


async def test_a_transient_error_is_redelivered_whatever_caused_it():
    async def handler(message, delivery):
        return None

    consumer = Consumer(KafkaSettings(), ["t"], group_id="g", message_type=Note, handler=handler)
    record = ConsumerRecord("t", 0, 7, 0, 0, None, b'{"text":"x"}', None, 0, 0, [])
    try:
        raise TransientError("redis: lost") from KeyError("a cause that alone would be permanent")
    except TransientError as exc:
        assert await consumer._failed(record, exc) is False  # False: redeliver, never dead-letter

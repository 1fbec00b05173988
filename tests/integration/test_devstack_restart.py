"""restart_component: a core component comes back on the same port with the same data and a new pid.

Kafka keeps its topics, messages and committed consumer-group offsets (its storage is not formatted again).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from shoal.devstack import StackInfo
from shoal.devstack.errors import DevStackError
from shoal.devstack.procs import read_pid
from shoal.devstack.restart import component_spec, restart_component


def state_of(stack: Any) -> Path:
    if not stack.state_dir:
        pytest.fail("attached stack without SHOAL_DEV_STATE_DIR: export what `shoal dev up` printed",
                    pytrace=False)
    return Path(stack.state_dir)


def tie() -> bool:
    """Tie restarted servers to pytest only when the suite started the stack itself."""
    return not os.environ.get("SHOAL_KUBECONFIG")


async def test_kafka_restarts_on_its_port_with_its_data(stack: Any) -> None:
    state = state_of(stack)
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    meta = (state / "kafka" / "data" / "meta.properties").read_text()
    producer = AIOKafkaProducer(bootstrap_servers=stack.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(3):
            await producer.send_and_wait(topic, f"m{i}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=stack.kafka_bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        first = await consumer.getone()
        await consumer.commit({TopicPartition(topic, first.partition): first.offset + 1})
    finally:
        await consumer.stop()
    old_pid = read_pid(state, "kafka")
    assert old_pid is not None

    took = restart_component(state, "kafka", tie_to_parent=tie())

    new_pid = read_pid(state, "kafka")
    assert new_pid is not None and new_pid[0] != old_pid[0]
    info = StackInfo.load(state)
    assert info.pids["kafka"] == new_pid[0]
    assert info.kafka_bootstrap == stack.kafka_bootstrap
    assert (state / "kafka" / "data" / "meta.properties").read_text() == meta  # not formatted again
    assert took > 0
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=stack.kafka_bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        rest = await consumer.getmany(timeout_ms=10_000)
        values = [r.value for records in rest.values() for r in records]
    finally:
        await consumer.stop()
    assert values == [b"m1", b"m2"], "the committed offset and the messages after it survive"
    print(f"\nkafka restart-to-ready {took:.1f}s")


def test_redis_restarts_on_its_port(stack: Any) -> None:
    import redis

    state = state_of(stack)
    old = read_pid(state, "redis")
    took = restart_component(state, "redis", tie_to_parent=tie())
    new = read_pid(state, "redis")
    assert old is not None and new is not None and new[0] != old[0]
    client = redis.Redis.from_url(stack.redis_url)
    try:
        assert client.ping()
    finally:
        client.close()
    assert took < 20


def test_unknown_component_is_refused(stack: Any) -> None:
    with pytest.raises(DevStackError, match="not a core component"):
        component_spec(state_of(stack), "shoal-planner")

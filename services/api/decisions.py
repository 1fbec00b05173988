"""The api's view of `shoal.decisions.v1`: a bounded in-memory index, a live fan-out to SSE clients, readers.

    index = DecisionIndex(per_subject=20, subjects=50_000, recent=200)
    hub = Hub(queue_size=1000)
    await tail(kafka_settings, topic, index=index, hub=hub, backlog=5000)   # until cancelled
    index.about(["team-a/train-0", "team-a/train"])    # the last decisions about these subjects, oldest first
    async with hub.subscribe() as queue: event = await queue.get()

The api reads the topic as an observer (no consumer group, nothing committed): at start it seeks each partition
`backlog` messages back so explain has recent history, then follows. Decisions about a pod are also filed under
its PodGroup (`data.podGroup`), so explaining a group shows what happened to its pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from shoal.adapters.kafka import client_options, kafka_error
from shoal.logging import get_logger
from shoal.settings import KafkaSettings

log = get_logger("services.api")

Event = dict[str, Any]


def kind_of(event: Mapping[str, Any]) -> str:
    return str(event.get("type", "")).rsplit(".", 1)[-1]


def matches(event: Mapping[str, Any], *, subject: str = "", shard: str = "") -> bool:
    """The SSE filters: `subject` matches the event's subject or its PodGroup; `shard` its shard."""
    if shard and event.get("shard") != shard:
        return False
    if subject:
        data = event.get("data") or {}
        return subject in (event.get("subject"), data.get("podGroup"))
    return True


class DecisionIndex:
    """The last `per_subject` decisions of at most `subjects` subjects (least recently updated dropped first),
    plus the last `recent` decisions overall (dashboard). Events already seen (by id) are ignored."""

    def __init__(self, *, per_subject: int = 20, subjects: int = 50_000, recent: int = 200) -> None:
        self._per_subject = per_subject
        self._max_subjects = subjects
        self._by_subject: OrderedDict[str, deque[Event]] = OrderedDict()
        self._recent: deque[Event] = deque(maxlen=recent)
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._max_ids = max(subjects, recent) * 2

    def add(self, event: Event) -> bool:
        """File one decision; False for a duplicate."""
        event_id = str(event.get("id", ""))
        if event_id:
            if event_id in self._ids:
                return False
            self._ids[event_id] = None
            while len(self._ids) > self._max_ids:
                self._ids.popitem(last=False)
        self._recent.append(event)
        data = event.get("data") or {}
        for key in dict.fromkeys(k for k in (event.get("subject"), data.get("podGroup")) if k):
            bucket = self._by_subject.get(key)
            if bucket is None:
                bucket = self._by_subject[key] = deque(maxlen=self._per_subject)
            else:
                self._by_subject.move_to_end(key)
            bucket.append(event)
        while len(self._by_subject) > self._max_subjects:
            self._by_subject.popitem(last=False)
        return True

    def about(self, subjects: Sequence[str]) -> list[Event]:
        """Decisions about any of `subjects`, oldest first, each once."""
        seen: dict[str, Event] = {}
        for subject in subjects:
            for event in self._by_subject.get(subject, ()):
                seen.setdefault(str(event.get("id")), event)
        return sorted(seen.values(), key=lambda e: str(e.get("time", "")))

    def recent(self, limit: int | None = None) -> list[Event]:
        items = list(self._recent)
        return items[-limit:] if limit else items

    def __len__(self) -> int:
        return len(self._by_subject)


def offer(queue: asyncio.Queue[Event | None], event: Event | None, on_drop: Callable[[], None]) -> None:
    """Put without waiting; a full queue loses its oldest item."""
    if queue.full():
        with contextlib.suppress(asyncio.QueueEmpty):
            queue.get_nowait()
        on_drop()
    queue.put_nowait(event)


class Hub:
    """Fan-out of live decisions to subscribers; a subscriber too slow to keep up loses its oldest events
    (counted) rather than slowing the others."""

    def __init__(self, queue_size: int = 1000, on_drop: Callable[[], None] | None = None) -> None:
        self._queues: set[asyncio.Queue[Event | None]] = set()
        self._size = queue_size
        self._on_drop = on_drop or (lambda: None)

    @property
    def clients(self) -> int:
        return len(self._queues)

    def publish(self, event: Event | None) -> None:
        for queue in self._queues:
            offer(queue, event, self._on_drop)

    def close(self) -> None:
        """Tell every subscriber to stop (a None in its queue)."""
        self.publish(None)

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[Event | None]]:
        queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize=self._size)
        self._queues.add(queue)
        try:
            yield queue
        finally:
            self._queues.discard(queue)


_TEXT_FIELDS = ("id", "type", "time", "subject", "shard", "source")  # filed, matched and keyed by


def decode(value: bytes | None) -> Event | None:
    """A decision event, or None for a value that is not one (not JSON, nested too deeply, not an object, a
    field the index keys by that is not a string, `data` that is not an object)."""
    try:
        event = json.loads(value or b"")
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict) or not isinstance(event.get("data"), dict | None):
        return None
    if any(not isinstance(event.get(key), str | None) for key in _TEXT_FIELDS):
        return None
    return event if isinstance((event.get("data") or {}).get("podGroup"), str | None) else None


async def _assigned(settings: KafkaSettings, topic: str, *, wait_s: float = 60.0,
                    ) -> tuple[AIOKafkaConsumer, list[TopicPartition]]:
    """A group-less consumer given every partition of `topic` (waiting for a just-created topic's metadata)."""
    consumer = AIOKafkaConsumer(topic, **client_options(settings), group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", metadata_max_age_ms=5000,
                                fetch_max_wait_ms=settings.fetch_max_wait_ms)
    try:
        await consumer.start()
        deadline = asyncio.get_running_loop().time() + wait_s
        while not consumer.assignment():
            if asyncio.get_running_loop().time() > deadline:
                raise kafka_error(KafkaError(f"topic {topic} has no partitions after {wait_s:.0f}s"))
            await asyncio.sleep(0.2)
    except KafkaError as exc:
        await consumer.stop()
        raise kafka_error(exc) from exc
    except BaseException:
        await consumer.stop()
        raise
    return consumer, sorted(consumer.assignment())


async def _records(consumer: AIOKafkaConsumer) -> AsyncIterator[Event]:
    while True:
        batch = await consumer.getmany(timeout_ms=500, max_records=500)
        for records in batch.values():
            for record in records:
                event = decode(record.value)
                if event is None:
                    log.warning("decision_unreadable", topic=record.topic, partition=record.partition,
                                offset=record.offset, value=(record.value or b"")[:200].decode(errors="replace"))
                    continue
                yield event


async def tail(settings: KafkaSettings, topic: str, *, index: DecisionIndex, hub: Hub, backlog: int,
               on_event: Callable[[Event], None] | None = None, ready: asyncio.Event | None = None) -> None:
    """Fill the index with the last `backlog` decisions of each partition, then follow the topic forever."""
    consumer, partitions = await _assigned(settings, topic)
    try:
        ends = await consumer.end_offsets(partitions)
        starts = await consumer.beginning_offsets(partitions)
        for tp in partitions:
            consumer.seek(tp, max(starts[tp], ends[tp] - backlog))
        if ready is not None:
            ready.set()
        log.info("decisions_tail_started", topic=topic, partitions=len(partitions), backlog=backlog)
        async for event in _records(consumer):
            if index.add(event):
                if on_event is not None:
                    on_event(event)
                hub.publish(event)
    finally:
        await consumer.stop()


async def from_beginning(settings: KafkaSettings, topic: str) -> AsyncIterator[Event]:
    """Every decision on the topic from the first one kept, then new ones as they come (one SSE client)."""
    consumer, partitions = await _assigned(settings, topic)
    try:
        await consumer.seek_to_beginning(*partitions)
        async for event in _records(consumer):
            yield event
    finally:
        await consumer.stop()


def select(events: Iterable[Event], *, subject: str = "", shard: str = "") -> list[Event]:
    return [e for e in events if matches(e, subject=subject, shard=shard)]

"""Kafka bus over aiokafka: JSON-encoded msgspec Structs, at-least-once consumption, dead letters.

Publishing (idempotent producer, acks=all)::

    async with Publisher(settings.kafka) as bus:
        await bus.publish("shoal.plans.v1", plan, key=shard)   # key by shard: one partition per shard

Consuming (offsets committed manually, only after the handler finished)::

    async def on_plan(plan: Plan, delivery: Delivery) -> None: ...   # or a future: the rest of its work

    consumer = Consumer(settings.kafka, ["shoal.plans.v1"], group_id="binder", message_type=Plan,
                        handler=on_plan)
    async with consumer:
        await consumer.run()          # until consumer.stop() (or cancellation)

A message that cannot be decoded into `message_type` (a Struct or a tagged union of Structs) goes to
`<topic>.dlq` with its original bytes, key and headers plus `shoal-dlq-*` headers, and is committed. A handler
error is classified by `classify`: transient ones are retried with backoff and, if still failing, the partition is
rewound to that message (nothing committed past it); permanent ones go to the dead-letter topic; an
`InvariantBroken` ends `run()` with that error (the process should crash). A handler may return a future
holding the rest of its work: with `pipeline=N` up to N messages per partition are under way at once, and an
offset is committed only when its work and all earlier work of the partition finished (`shoal.adapters.
unfinished`); a failure of that work is classified like a handler's, rewinding the partition to it.

Topics: `await ensure_topics(settings.kafka, ["shoal.plans.v1"], partitions=8)` also creates the `.dlq` topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, Literal, TypeVar

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.conn import create_conn
from aiokafka.errors import (
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    OutOfOrderSequenceNumber,
    ProducerClosed,
    SaslAuthenticationFailed,
    UnknownProducerId,
)
from aiokafka.helpers import create_ssl_context
from aiokafka.structs import ConsumerRecord
from redis.exceptions import RedisError

from shoal.adapters.kafka_fetch import adapt_fetch_wait
from shoal.adapters.redis_client import redis_error
from shoal.adapters.unfinished import Unfinished
from shoal.errors import InvariantBroken, PermanentError, ShoalError, TransientError
from shoal.logging import get_logger
from shoal.metrics import Metrics
from shoal.retry import RetryPolicy, retry_transient
from shoal.settings import KafkaSettings

T = TypeVar("T")

DLQ_SUFFIX = ".dlq"
TOPIC_ALREADY_EXISTS = 36
FETCH_MAX_BYTES = 52_428_800  # aiokafka's own default for a whole fetch

log = get_logger(__name__)
_encoder = msgspec.json.Encoder()

Outcome = Literal["transient", "permanent", "fatal"]
# what decoding a message can raise: bytes that are not JSON (or are truncated), JSON of the wrong shape, a
# `type` tag from another version, a missing field, and JSON nested deeper than the decoder recurses
UNDECODABLE = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)

HANDLER_RETRY = RetryPolicy(attempts=3, initial_s=0.2, max_backoff_s=2.0)
# The idempotent producer's sequence numbers no longer match the broker's (e.g. a batch expired while the
# broker was down): every later send of that producer fails. A fresh producer (new producer id) fixes it.
PRODUCER_STATE_ERRORS = (OutOfOrderSequenceNumber, UnknownProducerId, InvalidProducerEpoch,
                         InvalidProducerIdMapping)


def _finished_future() -> asyncio.Future:
    """A future that has finished: a message handled at once, queued behind earlier work still under way."""
    future = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


def dlq_topic(topic: str) -> str:
    return topic + DLQ_SUFFIX


def kafka_error(exc: BaseException) -> ShoalError:
    """Map an aiokafka error to Shoal's hierarchy: connection problems and retriable errors are transient."""
    # KafkaTimeoutError: a send waited out request_timeout_ms (broker down); it is not marked retriable
    if isinstance(exc, KafkaConnectionError | KafkaTimeoutError | ConnectionError | asyncio.TimeoutError):
        return TransientError(f"kafka: {exc}")
    if isinstance(exc, KafkaError) and exc.retriable:
        return TransientError(f"kafka: {exc}")
    return PermanentError(f"kafka: {exc}")


def client_options(settings: KafkaSettings) -> dict[str, Any]:
    """Connection keyword arguments shared by aiokafka's producer, consumer and admin client."""
    opts: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap,
        "client_id": settings.client_id,
        "security_protocol": settings.security_protocol,
        "request_timeout_ms": settings.request_timeout_ms,
    }
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        opts["ssl_context"] = create_ssl_context(
            cafile=settings.ssl_cafile, certfile=settings.ssl_certfile, keyfile=settings.ssl_keyfile)
    if settings.security_protocol.startswith("SASL_"):
        opts["sasl_mechanism"] = settings.sasl_mechanism
        opts["sasl_plain_username"] = settings.sasl_username
        opts["sasl_plain_password"] = settings.sasl_password
    return opts


@contextlib.asynccontextmanager
async def _admin(settings: KafkaSettings) -> AsyncIterator[AIOKafkaAdminClient]:
    """A started admin client (bootstrapped: a broker answered), closed afterwards; Kafka errors mapped."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    try:
        await admin.start()
        yield admin
    except KafkaError as exc:
        raise kafka_error(exc) from exc
    finally:
        await admin.close()


async def kafka_reachable(settings: KafkaSettings) -> None:
    """Return once a broker answers (bootstrap and metadata); raise the mapped error if none does.

    aiokafka reports a broker that refuses the SASL credentials or presents an untrusted certificate as
    "unable to bootstrap", which reads as not there yet: a direct connection then tells those apart, and they
    are permanent (waiting would never help)."""
    try:
        async with _admin(settings):
            pass
    except TransientError:
        refusal = await _refusal(settings)
        if refusal is not None:
            raise PermanentError(refusal) from None
        raise


async def _refusal(settings: KafkaSettings) -> str | None:
    """Why the first bootstrap broker that answers refuses this client (credentials, TLS), or None."""
    opts = client_options(settings)
    for server in settings.bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            conn = await asyncio.wait_for(create_conn(
                host or "127.0.0.1", int(port), security_protocol=settings.security_protocol,
                ssl_context=opts.get("ssl_context"), sasl_mechanism=settings.sasl_mechanism or "PLAIN",
                sasl_plain_username=settings.sasl_username, sasl_plain_password=settings.sasl_password,
                request_timeout_ms=settings.request_timeout_ms), timeout=10)
        except SaslAuthenticationFailed as exc:
            return (f"kafka: {server.strip()} rejected the SASL credentials of user {settings.sasl_username!r} "
                    f"({settings.sasl_mechanism}): {exc.description or exc}; check SHOAL_KAFKA_SASL_USERNAME, "
                    "SHOAL_KAFKA_SASL_PASSWORD and SHOAL_KAFKA_SASL_MECHANISM")
        except ssl.SSLCertVerificationError as exc:
            return (f"kafka: the certificate of {server.strip()} is not trusted ({exc.verify_message}); set "
                    "SHOAL_KAFKA_SSL_CAFILE to the CA that signed it")
        except (KafkaError, OSError, ValueError, TimeoutError):
            continue
        conn.close()
    return None


async def ensure_topics(settings: KafkaSettings, topics: Iterable[str], *, partitions: int = 1,
                        replication_factor: int = 1, with_dlq: bool = True,
                        configs: Mapping[str, str] | None = None) -> list[str]:
    """Create the topics (and their `.dlq` topics) that do not exist yet, taking messages up to
    `settings.max_message_bytes` unless `configs` says otherwise; returns the names created."""
    names = list(dict.fromkeys(topics))
    configs = {"max.message.bytes": str(settings.max_message_bytes), **(configs or {})}
    if with_dlq:
        names += [dlq_topic(t) for t in names if not t.endswith(DLQ_SUFFIX)]
    async with _admin(settings) as admin:
        response = await admin.create_topics([
            NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                     topic_configs=configs) for name in names])
    created = []
    for name, code, *rest in response.topic_errors:
        if code == 0:
            created.append(name)
        elif code != TOPIC_ALREADY_EXISTS:
            raise PermanentError(f"kafka: cannot create topic {name}: error {code} {rest[0] if rest else ''}")
    if created:
        log.info("kafka_topics_created", topics=created, partitions=partitions)
    return created


def _key_bytes(key: str | bytes | None) -> bytes | None:
    return key.encode() if isinstance(key, str) else key


class Publisher:
    """An idempotent producer (acks=all) that publishes msgspec Structs as JSON."""

    def __init__(self, settings: KafkaSettings, *, linger_ms: int = 0) -> None:
        self._settings = settings
        self._linger_ms = linger_ms
        self._producer = self._new_producer()
        self._started = False
        self._resetting = asyncio.Lock()
        # one message per topic enters the producer's buffer at a time: aiokafka wakes every send waiting for room
        # in a partition's batch whenever one drains, and each goes back to waiting (thousands of sends gathered at
        # once, a plan's decisions: ~600 µs of CPU per message, most of it those wake-ups); queued here, each send
        # waits once, in order
        self._enqueue: dict[str, asyncio.Lock] = {}

    def _new_producer(self) -> AIOKafkaProducer:
        return AIOKafkaProducer(**client_options(self._settings), acks="all", enable_idempotence=True,
                                linger_ms=self._linger_ms, max_request_size=self._settings.max_message_bytes)

    async def _reset(self, broken: AIOKafkaProducer, error: KafkaError) -> None:
        """Replace a producer whose idempotence state the broker rejects (once, however many sends saw it)."""
        async with self._resetting:
            if self._producer is not broken or not self._started:
                return
            log.warning("kafka_producer_reset", error=str(error))
            fresh = self._new_producer()
            try:
                await fresh.start()
            except KafkaError as exc:
                await fresh.stop()
                raise kafka_error(exc) from exc
            self._producer = fresh
            try:
                await broken.stop()
            except KafkaError as exc:
                log.warning("kafka_producer_stop_failed", error=str(exc))

    async def start(self) -> None:
        try:
            await self._producer.start()
        except KafkaError as exc:
            await self._producer.stop()
            raise kafka_error(exc) from exc
        self._started = True

    async def stop(self) -> None:
        self._started = False
        await self._producer.stop()

    async def __aenter__(self) -> Publisher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def ready(self) -> bool:
        return self._started

    async def publish(self, topic: str, message: msgspec.Struct, *, key: str | bytes | None = None,
                      headers: Mapping[str, str | bytes] | None = None) -> tuple[int, int]:
        """Send one Struct as JSON and wait for all in-sync replicas; returns (partition, offset)."""
        return await self.publish_raw(topic, _encoder.encode(message), key=key, headers=headers)

    async def publish_raw(self, topic: str, value: bytes, *, key: str | bytes | None = None,
                          headers: Mapping[str, str | bytes] | Sequence[tuple[str, bytes]] | None = None,
                          ) -> tuple[int, int]:
        if isinstance(headers, Mapping):
            pairs = [(k, v.encode() if isinstance(v, str) else v) for k, v in headers.items()]
        else:
            pairs = list(headers or ())
        for attempt in (1, 2):
            producer = self._producer
            try:
                async with self._enqueue.setdefault(topic, asyncio.Lock()):
                    delivered = await producer.send(topic, value, key=_key_bytes(key), headers=pairs or None)
                meta = await delivered
            except PRODUCER_STATE_ERRORS as exc:
                if attempt == 2:
                    raise kafka_error(exc) from exc
                await self._reset(producer, exc)
            except ProducerClosed as exc:
                if attempt == 2 or producer is self._producer or not self._started:
                    raise kafka_error(exc) from exc
                # the producer was replaced by a reset while this send waited: send it on the fresh one
            except KafkaError as exc:
                raise kafka_error(exc) from exc
            else:
                return meta.partition, meta.offset
        raise AssertionError("unreachable")


class Delivery(msgspec.Struct, frozen=True):
    """Where a consumed message came from."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


def default_classify(exc: BaseException) -> Outcome:
    """InvariantBroken is fatal; Shoal's transient errors, connection errors and timeouts are retried;
    anything else (bad content, bugs triggered by one message) sends the message to the dead-letter topic."""
    if isinstance(exc, InvariantBroken):
        return "fatal"
    if isinstance(exc, TransientError | KafkaTimeoutError | ConnectionError | asyncio.TimeoutError):
        return "transient"
    if isinstance(exc, KafkaError) and exc.retriable:
        return "transient"
    if isinstance(exc, RedisError):  # a Redis call made without redis_call's mapping
        return "transient" if isinstance(redis_error(exc), TransientError) else "permanent"
    return "permanent"


class _CommitOnRevoke(ConsumerRebalanceListener):
    def __init__(self, consumer: Consumer[Any]) -> None:
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        async with self.consumer._lock:  # wait for the message in hand and its work, then commit what is done
            self.consumer._owned -= set(revoked)  # fetched records of these are no longer ours to handle
            await self.consumer._finish(set(revoked))
            await self.consumer._commit(set(revoked))
            log.info("kafka_partitions_revoked", group=self.consumer.group_id,
                     partitions=sorted(f"{tp.topic}/{tp.partition}" for tp in revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.consumer._owned = set(assigned)
        log.info("kafka_partitions_assigned", group=self.consumer.group_id,
                 partitions=sorted(f"{tp.topic}/{tp.partition}" for tp in assigned))


class Consumer(Generic[T]):
    """A consumer-group member that decodes each message into `message_type`, awaits `handler`, and commits
    the offset only afterwards (at-least-once; handlers must tolerate duplicates, e.g. by `meta.id`)."""

    def __init__(self, settings: KafkaSettings, topics: Sequence[str], *, group_id: str, message_type: Any,
                 handler: Callable[[T, Delivery], Awaitable[asyncio.Future | None]], dlq: Publisher | None = None,
                 classify: Callable[[BaseException], Outcome] = default_classify,
                 retry: RetryPolicy = HANDLER_RETRY,
                 redelivery_backoff_s: float = 1.0, max_records: int = 100, pipeline: int = 1,
                 metrics: Metrics | None = None) -> None:
        self.group_id = group_id
        self.topics = list(topics)
        self._settings = settings
        self._decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(message_type)
        self._handler = handler
        self._classify = classify
        self._retry = retry
        self._redelivery_backoff_s = redelivery_backoff_s
        self._max_records = max_records
        self._dlq = dlq
        self._own_dlq = dlq is None
        self._consumer: AIOKafkaConsumer | None = None
        self._pending: dict[TopicPartition, int] = {}
        self._unfinished = Unfinished(pipeline)  # work handlers left running, per partition in offset order
        self._owned: set[TopicPartition] = set()
        self._lock = asyncio.Lock()
        self._committed_at = float("-inf")  # loop time of the last commit (`_commit_due`)
        self._stopping = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        metrics = metrics or Metrics()
        self._handled = metrics.counter("kafka_messages_handled_total", "Messages handled (committed within commit_interval_ms).",
                                        ["topic"])
        self._dead = metrics.counter("kafka_messages_dead_lettered_total", "Messages sent to a .dlq topic.",
                                     ["topic", "reason"])
        self._rewinds = metrics.counter("kafka_redeliveries_total",
                                        "Partitions rewound after a transient handler failure.", ["topic"])

    async def start(self) -> None:
        s = self._settings
        self._consumer = AIOKafkaConsumer(
            **client_options(s), group_id=self.group_id, enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms, max_poll_interval_ms=s.max_poll_interval_ms,
            fetch_max_wait_ms=s.fetch_max_wait_ms, max_partition_fetch_bytes=s.max_message_bytes,
            fetch_max_bytes=max(s.max_message_bytes, FETCH_MAX_BYTES))
        self._consumer.subscribe(self.topics, listener=_CommitOnRevoke(self))
        if self._dlq is None:
            self._dlq = Publisher(s)
        try:
            await self._consumer.start()
            if s.idle_fetch_wait_ms > s.fetch_max_wait_ms:
                adapt_fetch_wait(self._consumer, idle_ms=s.idle_fetch_wait_ms)
            if self._own_dlq:
                await self._dlq.start()
        except KafkaError as exc:
            await self._consumer.stop()
            raise kafka_error(exc) from exc

    async def stop(self) -> None:
        """Finish the message in hand, commit what is done, leave the group."""
        self._stopping.set()
        await self._idle.wait()
        if self._consumer is not None:
            async with self._lock:
                await self._finish(None)
            await self._commit(None)
            await self._consumer.stop()
            self._consumer = None
        if self._own_dlq and self._dlq is not None:
            await self._dlq.stop()

    async def __aenter__(self) -> Consumer[T]:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def ready(self) -> bool:
        return self._consumer is not None and not self._stopping.is_set()

    def decode(self, value: bytes | None) -> T:
        """The message in a record's value; raises one of UNDECODABLE when it holds none."""
        return self._decoder.decode(value or b"")

    async def run(self) -> None:
        """Consume until `stop()`; raises only for a fatal handler error (InvariantBroken by default)."""
        if self._consumer is None:
            raise RuntimeError("Consumer.run() before start()")
        self._idle.clear()
        try:
            while not self._stopping.is_set():
                batches = await self._consumer.getmany(timeout_ms=200, max_records=self._max_records)
                rewound = False
                for tp, records in batches.items():
                    rewound |= await self._process(tp, records)
                    if self._stopping.is_set():
                        break
                async with self._lock:
                    for tp in self._unfinished.partitions():
                        rewound |= await self._settle(tp)
                if self._commit_due():
                    await self._commit(None)
                if rewound:
                    await self._pause(self._redelivery_backoff_s)
        finally:
            self._idle.set()

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass

    async def _process(self, tp: TopicPartition, records: list[ConsumerRecord]) -> bool:
        """Handle one partition's batch in order; True if it was rewound to redeliver a failed message."""
        assert self._consumer is not None
        for record in records:
            if self._stopping.is_set():
                return False
            async with self._lock:
                if tp not in self._owned:
                    return False  # revoked while we worked; the new owner continues from the commit
                await self._unfinished.room(tp)
                if await self._settle(tp):
                    return True  # earlier work failed: the partition was rewound to it
                outcome = await self._handle(record)
                if outcome is False:
                    await self._rewind(tp, record.offset)
                    return True
                if isinstance(outcome, asyncio.Future):
                    self._unfinished.add(tp, record, outcome)
                    continue
                if not self._unfinished.empty(tp):  # done, but counted only after the earlier work
                    self._unfinished.add(tp, record, _finished_future())
                    continue
                self._done(tp, record.offset)
        return False

    def _done(self, tp: TopicPartition, offset: int) -> None:
        self._pending[tp] = offset + 1
        self._handled.labels(topic=tp.topic).inc()

    async def _rewind(self, tp: TopicPartition, offset: int) -> None:
        """Redeliver from `offset`: the later work under way finishes first (handlers tolerate the replays)."""
        assert self._consumer is not None
        await self._unfinished.drain([tp])
        self._unfinished.discard(tp)
        self._consumer.seek(tp, offset)
        self._rewinds.labels(topic=tp.topic).inc()

    async def _settle(self, tp: TopicPartition, *, rewind: bool = True) -> bool:
        """Count the finished work at the front of `tp` as done; True if a failure rewound the partition."""
        for record, error in self._unfinished.finished(tp):
            if error is None:
                self._done(tp, record.offset)
                continue
            if not await self._failed(record, error):
                if rewind:
                    await self._rewind(tp, record.offset)
                else:
                    self._unfinished.discard(tp)  # nothing committed past it; whoever owns it next redelivers
                return True
            self._done(tp, record.offset)  # dead-lettered
        return False

    async def _finish(self, tps: set[TopicPartition] | None) -> None:
        """Wait for the work under way of `tps` (all when None) and count what succeeded (revoke, stop)."""
        await self._unfinished.drain(tps)
        for tp in (tps if tps is not None else self._unfinished.partitions()):
            await self._settle(tp, rewind=False)
            self._unfinished.discard(tp)

    async def _handle(self, record: ConsumerRecord) -> bool | asyncio.Future:
        """True when the message is done with (handled or dead-lettered), False to redeliver it later, or the
        future of the work its handler left running."""
        delivery = Delivery(record.topic, record.partition, record.offset, record.key,
                            tuple(record.headers or ()), record.timestamp)
        try:
            message = self.decode(record.value)
        except UNDECODABLE as exc:
            return await self._dead_letter(record, exc, "undecodable")

        async def attempt() -> asyncio.Future | None:
            try:
                return await self._handler(message, delivery)
            except TransientError:
                raise
            except Exception as exc:
                if self._classify(exc) == "transient":
                    raise TransientError(str(exc)) from exc
                raise

        try:
            work = await retry_transient(attempt, policy=self._retry, what=f"handle:{record.topic}")
            return work if isinstance(work, asyncio.Future) else True
        except Exception as exc:
            return await self._failed(record, exc)

    async def _failed(self, record: ConsumerRecord, exc: BaseException) -> bool:
        """A handler's (or its left work's) failure: True when dead-lettered, False to redeliver later."""
        # a TransientError is transient whatever caused it (redis_call maps a lost connection to one); the
        # cause is what the log and the dead letter name
        cause = exc.__cause__ if isinstance(exc, TransientError) and exc.__cause__ else exc
        outcome = "transient" if isinstance(exc, TransientError) else self._classify(exc)
        if outcome == "fatal":
            log.error("kafka_handler_fatal", topic=record.topic, partition=record.partition,
                      offset=record.offset, error=str(cause))
            raise exc
        if outcome == "transient":
            log.warning("kafka_handler_retry_later", topic=record.topic, partition=record.partition,
                        offset=record.offset, error=str(cause))
            return False
        log.error("kafka_handler_failed", topic=record.topic, partition=record.partition, offset=record.offset,
                  exc_type=type(exc).__name__, exc="".join(traceback.format_exception(exc)))
        return await self._dead_letter(record, cause, "handler_failed")

    async def _dead_letter(self, record: ConsumerRecord, error: BaseException, reason: str) -> bool:
        assert self._dlq is not None
        headers = list(record.headers or ()) + [
            ("shoal-dlq-reason", reason.encode()),
            ("shoal-dlq-error", f"{type(error).__name__}: {error}"[:2000].encode(errors="replace")),
            ("shoal-dlq-source", f"{record.topic}/{record.partition}/{record.offset}".encode()),
            ("shoal-dlq-group", self.group_id.encode()),
        ]
        try:
            await self._dlq.publish_raw(dlq_topic(record.topic), record.value or b"", key=record.key,
                                        headers=headers)
        except ShoalError as exc:
            log.warning("kafka_dead_letter_failed", topic=record.topic, offset=record.offset, error=str(exc))
            return False
        self._dead.labels(topic=record.topic, reason=reason).inc()
        log.warning("kafka_message_dead_lettered", topic=record.topic, partition=record.partition,
                    offset=record.offset, reason=reason, error=str(error))
        return True

    def _commit_due(self) -> bool:
        """The consume loop commits at most once per `commit_interval_ms` (the round trip delays its next
        records); what was done meanwhile waits for the next commit, a stop or a rebalance."""
        return asyncio.get_running_loop().time() >= self._committed_at + self._settings.commit_interval_ms / 1000

    async def _commit(self, only: set[TopicPartition] | None) -> None:
        """Commit the done offsets (of `only` these partitions)."""
        offsets = {tp: off for tp, off in self._pending.items() if only is None or tp in only}
        if not offsets or self._consumer is None:
            return
        self._committed_at = asyncio.get_running_loop().time()
        for tp in offsets:
            del self._pending[tp]
        try:
            await self._consumer.commit(offsets)
        except KafkaError as exc:  # rebalanced meanwhile: the new owner redelivers; handlers de-duplicate
            log.warning("kafka_commit_failed", group=self.group_id, error=str(exc))

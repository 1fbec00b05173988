"""Typed shard snapshots in Redis: a base now and then, one delta per revision (msgpack via msgspec).

    writer = SnapshotWriter(redis, retain_s=300)
    await writer.publish_base(shard, revision, model.entries(), taken_at=t)     # False: someone is ahead
    await writer.publish_delta(shard, revision, changes, chain=c, taken_at=t)   # False: not the chain's next
    reader = SnapshotReader(redis)
    current = await reader.read(shard)      # Current(revision, taken_at, model, …) or None: nothing published

Writes: a base's parts first (each a few MB, so Redis's one thread is never held long), then one MULTI/EXEC
guarded by WATCH on the latest pointer that stores the header and moves the base and latest pointers; the
superseded base and every delta of its chain get a TTL of `retain_s` (readers in the middle of a read can
still finish). A delta is stored only as the direct successor of the latest revision (same WATCH), so the
pointer never goes backwards, never names a missing value, and one chain never has gaps.

Reads: a reader keeps the model of the revision it read last and applies the deltas after it (one MGET); a
reader that has none, is on another chain or finds a delta gone reads the newest base and its deltas. A base
stored as a checkpoint of the chain (`follows`) comes with its revision's delta, so a reader that follows
never reads it.
"""

from __future__ import annotations

import gc
import uuid
from dataclasses import dataclass, field
from typing import TypeVar, cast

import msgspec
from redis.asyncio import Redis
from redis.exceptions import WatchError

from shoal.adapters import redis_keys
from shoal.adapters.redis_client import redis_call
from shoal.core.ingest.shard_model import FIELDS, Changes, Entries, ShardModel
from shoal.errors import ConflictError, PermanentError, TransientError
from shoal.messages.snapshot import SNAPSHOT_SCHEMA, SnapshotBase, SnapshotDelta

T = TypeVar("T")
PART_ITEMS = 4_000  # entries per base part: pods are a few hundred bytes each
_encoder = msgspec.msgpack.Encoder()
_base = msgspec.msgpack.Decoder(SnapshotBase)
_delta = msgspec.msgpack.Decoder(SnapshotDelta)
_entries = msgspec.msgpack.Decoder(Entries)


class SnapshotUnreadable(PermanentError):
    """A stored snapshot this reader cannot use: written by a newer schema, or not a snapshot at all."""


def _decode(decoder: msgspec.msgpack.Decoder[T], blob: bytes, what: str) -> T:
    try:
        value = decoder.decode(blob)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SnapshotUnreadable(f"{what} in Redis cannot be decoded ({exc}): it was not written by a Shoal "
                                 "snapshotter of this version") from None
    schema = getattr(value, "schema", SNAPSHOT_SCHEMA)
    if schema > SNAPSHOT_SCHEMA:
        raise SnapshotUnreadable(f"{what} in Redis is snapshot schema {schema}; this reader knows schema "
                                 f"{SNAPSHOT_SCHEMA} and older: upgrade it, or roll the snapshotter back")
    return value


@dataclass
class Current:
    """A reader's view of one shard: the model at `revision`."""

    revision: int
    chain: str
    taken_at: str
    model: ShardModel
    require_podgroup: bool = False


def split(entries: Entries, per_part: int = PART_ITEMS) -> list[Entries]:
    """The entries in parts of at most `per_part` items (one empty part for an empty model)."""
    parts = [Entries(**{name: chunk})
             for name in FIELDS for items in (getattr(entries, name),)
             for chunk in (items[i:i + per_part] for i in range(0, len(items), per_part))]
    return parts or [Entries()]


class SnapshotWriter:
    def __init__(self, redis: Redis, *, retain_s: float = 300.0, max_cas_tries: int = 50) -> None:
        self._redis = redis
        self._retain_ms = max(1, int(retain_s * 1000))
        self._max_cas_tries = max_cas_tries

    async def latest_revision(self, shard: str) -> int | None:
        raw = await redis_call("snapshot_latest_revision", lambda: self._redis.get(redis_keys.snapshot_latest(shard)))
        return int(raw) if raw is not None else None

    async def publish_base(self, shard: str, revision: int, entries: Entries, *, taken_at: str,
                           require_podgroup: bool = False,
                           follows: tuple[str, Changes] | None = None) -> tuple[str, int] | None:
        """Store the whole model as `revision`: (chain, bytes written), or None when the latest revision is
        already >= `revision` (nothing is made the latest then; the parts written expire).

        `follows=(chain, changes)`: a checkpoint of that chain, stored only if the latest revision is
        `revision - 1` (else None), with the delta of `revision` (`changes`) beside it, so readers that
        follow the chain go on by that delta and only a reader without a model reads the base. Without
        `follows` a base starts a new chain, and every reader reads it."""
        if revision < 0:
            raise ValueError(f"revision must be >= 0, got {revision}")
        blobs = [_encoder.encode(part) for part in split(entries)]
        chain = follows[0] if follows is not None else uuid.uuid4().hex
        header = SnapshotBase(shard=shard, revision=revision, chain=chain, taken_at=taken_at, parts=len(blobs),
                              schema=SNAPSHOT_SCHEMA,
                              require_podgroup=require_podgroup)
        delta = None if follows is None else _encoder.encode(SnapshotDelta(
            shard=shard, revision=revision, chain=chain, taken_at=taken_at, schema=SNAPSHOT_SCHEMA,
            changes=follows[1], require_podgroup=require_podgroup))

        async def write_parts() -> None:
            async with self._redis.pipeline(transaction=False) as pipe:
                for i, blob in enumerate(blobs):
                    pipe.set(redis_keys.snapshot_base_part(shard, revision, i), blob)
                await pipe.execute()

        await redis_call("snapshot_base_parts", write_parts)
        stored = await redis_call("snapshot_base", lambda: self._swap_base(shard, header, delta))
        if not stored:
            await redis_call("snapshot_base_drop", lambda: self._expire_base(shard, revision, len(blobs)))
            return None
        return chain, sum(map(len, blobs))

    async def publish_delta(self, shard: str, revision: int, changes: Changes, *, chain: str, taken_at: str,
                            require_podgroup: bool = False) -> int | None:
        """Store what `revision` changed: bytes written, or None when the latest revision is not
        `revision - 1` (another writer moved on: publish a base instead)."""
        blob = _encoder.encode(SnapshotDelta(shard=shard, revision=revision, chain=chain, taken_at=taken_at,
                                             schema=SNAPSHOT_SCHEMA,
                                             changes=changes, require_podgroup=require_podgroup))
        stored = await redis_call("snapshot_delta", lambda: self._append(shard, revision, blob))
        return len(blob) if stored else None

    async def _append(self, shard: str, revision: int, blob: bytes) -> bool:
        latest_key = redis_keys.snapshot_latest(shard)
        async with self._redis.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(latest_key)
                raw = await pipe.get(latest_key)
                if raw is None or int(raw) != revision - 1:
                    return False
                pipe.multi()
                pipe.set(redis_keys.snapshot_delta(shard, revision), blob)
                pipe.set(latest_key, str(revision).encode())
                await pipe.execute()
                return True
            except WatchError:
                return False  # another writer moved the pointer: this chain cannot go on

    async def _swap_base(self, shard: str, header: SnapshotBase, delta: bytes | None = None) -> bool:
        """Make the base the latest; with `delta` (a checkpoint of the chain) only as the direct successor of
        the latest revision, and the delta stored with it (expiring: followers read it soon or never)."""
        latest_key = redis_keys.snapshot_latest(shard)
        base_key = redis_keys.snapshot_base_latest(shard)
        revision = header.revision
        for _ in range(self._max_cas_tries):
            async with self._redis.pipeline(transaction=True) as pipe:
                try:
                    await pipe.watch(latest_key, base_key)
                    raw_latest, raw_base = await pipe.get(latest_key), await pipe.get(base_key)
                    latest = int(raw_latest) if raw_latest is not None else None
                    if latest is not None and latest >= revision:
                        return False
                    if delta is not None and latest != revision - 1:
                        return False  # not the chain's next revision: another writer moved on
                    old_base = int(raw_base) if raw_base is not None else None
                    old_header = await pipe.get(redis_keys.snapshot_base(shard, old_base)) \
                        if old_base is not None else None
                    pipe.multi()
                    pipe.set(redis_keys.snapshot_base(shard, revision), _encoder.encode(header))
                    pipe.set(base_key, str(revision).encode())
                    pipe.set(latest_key, str(revision).encode())
                    if delta is not None:
                        pipe.set(redis_keys.snapshot_delta(shard, revision), delta, px=self._retain_ms)
                    if old_base is not None:
                        parts = _base.decode(cast(bytes, old_header)).parts if old_header is not None else 0
                        self._queue_expiry(pipe, shard, old_base, parts, latest if latest is not None else old_base)
                    await pipe.execute()
                    return True
                except WatchError:
                    continue
        raise ConflictError(f"snapshot base for shard {shard!r} lost {self._max_cas_tries} races in a row")

    def _queue_expiry(self, pipe, shard: str, base: int, parts: int, last: int) -> None:
        pipe.pexpire(redis_keys.snapshot_base(shard, base), self._retain_ms)
        for i in range(parts):
            pipe.pexpire(redis_keys.snapshot_base_part(shard, base, i), self._retain_ms)
        for rev in range(base + 1, last + 1):
            pipe.pexpire(redis_keys.snapshot_delta(shard, rev), self._retain_ms)

    async def _expire_base(self, shard: str, revision: int, parts: int) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            for i in range(parts):
                pipe.pexpire(redis_keys.snapshot_base_part(shard, revision, i), self._retain_ms)
            await pipe.execute()


@dataclass
class Progress:
    """The revision (and chain) a consumer handled last per shard. A revision of another chain is never
    skipped for being lower: after a Redis flush, or a writer that could not continue, numbering may restart."""

    revisions: dict[str, int] = field(default_factory=dict)
    chains: dict[str, str] = field(default_factory=dict)

    def handled(self, shard: str, revision: int, chain: str = "") -> bool:
        if shard not in self.revisions or (chain and chain != self.chains.get(shard)):
            return False
        return revision <= self.revisions[shard]

    def mark(self, shard: str, revision: int, chain: str) -> None:
        self.revisions[shard], self.chains[shard] = revision, chain


class SnapshotReader:
    """Keeps the newest model of each shard it reads; `max_deltas`: read a base instead beyond that many."""

    def __init__(self, redis: Redis, *, max_deltas: int = 2_000, tries: int = 5, refreeze_deltas: int = 1_000) -> None:
        self._redis = redis
        self._max_deltas = max_deltas
        self._tries = tries
        self._refreeze_deltas = refreeze_deltas
        self._unfrozen_deltas = 0  # deltas applied since the heap was last frozen
        self.current: dict[str, Current] = {}
        self.bases_read = 0
        self.deltas_read = 0

    async def read(self, shard: str) -> Current | None:
        """The newest revision of `shard` (None: nothing published yet)."""
        for _ in range(self._tries):
            raw = await redis_call("snapshot_latest_revision",
                                   lambda: self._redis.get(redis_keys.snapshot_latest(shard)))
            if raw is None:
                return None
            latest = int(raw)
            have = self.current.get(shard)
            if have is not None and have.revision == latest:
                return have
            if have is not None and have.revision < latest <= have.revision + self._max_deltas:
                if await self._follow(shard, have, latest):
                    return have
            fresh = await self._from_base(shard, latest)
            if fresh is not None:
                self.current[shard] = fresh
                return fresh
        raise TransientError(f"snapshot of shard {shard!r} kept moving away while being read")

    async def _deltas(self, shard: str, first: int, last: int) -> list[SnapshotDelta] | None:
        if last < first:
            return []
        keys = [redis_keys.snapshot_delta(shard, rev) for rev in range(first, last + 1)]
        blobs = await redis_call("snapshot_deltas", lambda: self._redis.mget(keys))
        if any(blob is None for blob in blobs):
            return None
        return [_decode(_delta, blob, f"delta {first + i} of shard {shard!r}") for i, blob in enumerate(blobs)]

    async def _follow(self, shard: str, have: Current, latest: int) -> bool:
        deltas = await self._deltas(shard, have.revision + 1, latest)
        if deltas is None or any(d.chain != have.chain for d in deltas):
            return False
        for delta in deltas:
            have.model.apply(delta.changes)
        self.deltas_read += len(deltas)
        self._unfrozen_deltas += len(deltas)
        if self._unfrozen_deltas >= self._refreeze_deltas:  # a follower may never read a base again
            self._freeze()
        last = deltas[-1]
        have.revision, have.taken_at, have.require_podgroup = last.revision, last.taken_at, last.require_podgroup
        return True

    def _freeze(self) -> None:
        """The model is most of a planner's heap (millions of objects at 4,000 nodes) and lives on: kept out of
        the cyclic GC's reach, a full collection no longer rescans it (~0.8 s each, at unpredictable moments of
        a cycle). Its objects are still freed by reference counting when dropped. Done after a base and after
        every `refreeze_deltas` deltas (what the deltas brought would be rescanned otherwise); collected
        first, everything frozen before included: cyclic garbage frozen would never be freed."""
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._unfrozen_deltas = 0

    async def _from_base(self, shard: str, latest: int) -> Current | None:
        raw = await redis_call("snapshot_base_revision", lambda: self._redis.get(redis_keys.snapshot_base_latest(shard)))
        if raw is None:
            return None
        base_rev = int(raw)
        blob = await redis_call("snapshot_base", lambda: self._redis.get(redis_keys.snapshot_base(shard, base_rev)))
        if blob is None or base_rev > latest:
            return None
        header = _decode(_base, blob, f"base {base_rev} of shard {shard!r}")
        keys = [redis_keys.snapshot_base_part(shard, base_rev, i) for i in range(header.parts)]
        parts = await redis_call("snapshot_base_parts", lambda: self._redis.mget(keys))
        if any(part is None for part in parts):
            return None
        model = ShardModel()
        for i, part in enumerate(parts):
            model.apply(Changes(upserts=_decode(_entries, part, f"base {base_rev} part {i} of shard {shard!r}")))
        current = Current(revision=base_rev, chain=header.chain, taken_at=header.taken_at, model=model,
                          require_podgroup=header.require_podgroup)
        self._freeze()
        self.bases_read += 1
        if latest > base_rev and not await self._follow(shard, current, latest):
            return None
        return current

"""Every Redis key Shoal uses, declared once, shaped `shoal:<kind>:<id>[:<id>…]`.

Usage::

    redis_keys.snapshot_delta("pool-a", 42)  # 'shoal:snapshot-delta:pool-a:42'
    redis_keys.snapshot_latest("pool-a")     # 'shoal:snapshot-latest:pool-a'

Ids are shard (node-pool) names, revisions, queue or consumer names; they may not be empty or contain ':'.
Add a kind here before using it anywhere else.
"""

from __future__ import annotations

PREFIX = "shoal"


def _key(kind: str, *ids: str | int) -> str:
    parts = [str(i) for i in ids]
    for part in parts:
        if not part or ":" in part:
            raise ValueError(f"invalid Redis key id {part!r} for kind {kind!r}")
    return ":".join([PREFIX, kind, *parts])


def snapshot_latest(shard: str) -> str:
    """The newest snapshot revision of a shard (an integer as text)."""
    return _key("snapshot-latest", shard)


def snapshot_delta(shard: str, revision: int) -> str:
    """What one revision of a shard's typed snapshot changed: msgpack SnapshotDelta (expires once a newer base
    is stored)."""
    return _key("snapshot-delta", shard, revision)


def snapshot_base(shard: str, revision: int) -> str:
    """The header of a shard's base snapshot at a revision: msgpack SnapshotBase."""
    return _key("snapshot-base", shard, revision)


def snapshot_base_part(shard: str, revision: int, part: int) -> str:
    """One part of a base snapshot: msgpack Entries (a few MB at most, so Redis is never blocked long)."""
    return _key("snapshot-base-part", shard, revision, part)


def snapshot_base_latest(shard: str) -> str:
    """The revision of a shard's newest base snapshot (an integer as text)."""
    return _key("snapshot-base-latest", shard)


def fair_share(shard: str) -> str:
    """Latest per-queue fair share of a shard: hash {revision, value}."""
    return _key("fairshare", shard)


def usage_history(shard: str) -> str:
    """Per-queue allocation history of a shard, for time-based fair share: hash {revision, value}."""
    return _key("usage", shard)


def inflight(shard: str) -> str:
    """Decisions of a shard sent to the binder and not yet seen done or failed: hash pod uid → msgpack entry."""
    return _key("inflight", shard)


def verdicts(shard: str) -> str:
    """The pending verdicts a shard's planner published last: hash "ns/podgroup" → msgpack Verdict
    (`shoal.adapters.verdicts`)."""
    return _key("verdicts", shard)


def seen(consumer: str, message_id: str) -> str:
    """Marks a message id as handled by a consumer group (de-duplication, with a TTL)."""
    return _key("seen", consumer, message_id)


def lease(name: str) -> str:
    """A named lease (holder id, with a TTL)."""
    return _key("lease", name)


def inflight_pattern() -> str:
    """SCAN pattern matching every shard's in-flight hash."""
    return f"{PREFIX}:inflight:*"


def usage_meta(shard: str) -> str:
    """Allocation history of a shard (time-based fair share): hash {params (JSON UsageParams), last (epoch s of
    the newest sample)}."""
    return _key("usage-meta", shard)


def usage_index(shard: str) -> str:
    """Allocation history of a shard: sorted set of the bucket starts (epoch s) held; old ones trimmed."""
    return _key("usage-index", shard)


def usage_bucket(shard: str, start_s: int) -> str:
    """One time bucket of a shard's allocation history: hash {seconds, cap:<resource>, q:<queue>:<resource>}
    holding amount·seconds integrals; expires after the window."""
    return _key("usage-bucket", shard, start_s)

"""Every Redis key Shoal uses, declared once, shaped `shoal:<kind>:<id>[:<id>…]`.

Usage::

    redis_keys.snapshot("pool-a", 42)      # 'shoal:snapshot:pool-a:42'
    redis_keys.snapshot_latest("pool-a")   # 'shoal:snapshot-latest:pool-a'

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


def snapshot(shard: str, revision: int) -> str:
    """One msgpack cluster snapshot of a shard at a revision (superseded ones expire)."""
    return _key("snapshot", shard, revision)


def snapshot_latest(shard: str) -> str:
    """The newest snapshot revision of a shard (an integer as text)."""
    return _key("snapshot-latest", shard)


def fair_share(shard: str) -> str:
    """Latest per-queue fair share of a shard: hash {revision, value}."""
    return _key("fairshare", shard)


def usage_history(shard: str) -> str:
    """Per-queue allocation history of a shard, for time-based fair share: hash {revision, value}."""
    return _key("usage", shard)


def inflight(shard: str) -> str:
    """Decisions of a shard sent to the binder and not yet seen done or failed: hash pod uid → msgpack entry."""
    return _key("inflight", shard)


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

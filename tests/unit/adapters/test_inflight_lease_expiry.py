"""A bind's lease that expired (or is about to) is no lease: the binder skips such a bind as stale.

Seen when Kafka restarted mid-burst: a plan reached the binder after its leases had expired, a later plan had
already given those GPUs to other pods, and applying the old plan over-committed a node.
"""

from __future__ import annotations

import msgspec

from shoal.adapters import redis_keys
from shoal.adapters.inflight import LEASE_GUARD_S, InFlight, live
from shoal.messages.snapshot import InFlightBind


class FakeRedis:
    def __init__(self) -> None:
        self.hashes: dict[str, dict[str, bytes]] = {}

    def register_script(self, script: str) -> object:
        return object()

    async def hset(self, key: str, mapping: dict[str, bytes]) -> None:
        self.hashes.setdefault(key, {}).update(mapping)

    async def hget(self, key: str, field: str) -> bytes | None:
        return self.hashes.get(key, {}).get(field)

    async def hmget(self, key: str, fields: list[str]) -> list[bytes | None]:
        return [self.hashes.get(key, {}).get(f) for f in fields]


def lease(uid: str, expires_at: float) -> InFlightBind:
    return InFlightBind(pod=f"ns/{uid}", pod_uid=uid, node="n1", plan_id="p1", expires_at=expires_at)


async def test_a_lease_counts_until_the_guard_before_it_expires() -> None:
    redis = FakeRedis()
    inflight = InFlight(redis)  # type: ignore[arg-type]
    await inflight.add("s", [lease("u1", expires_at=1000.0)])

    assert await inflight.get("s", "u1", now_s=1000.0 - LEASE_GUARD_S - 1) == lease("u1", 1000.0)
    assert await inflight.get("s", "u1", now_s=1000.0 - LEASE_GUARD_S) is None
    assert await inflight.get("s", "u1", now_s=1001.0) is None
    assert await inflight.get("s", "u2", now_s=0.0) is None
    assert msgspec.msgpack.decode(redis.hashes[redis_keys.inflight("s")]["u1"], type=InFlightBind).plan_id == "p1"


async def test_leases_read_at_once_are_checked_when_used() -> None:
    """The binder reads a plan's leases in one call and checks each when its bind goes out (a lease that
    expired meanwhile is no lease)."""
    inflight = InFlight(FakeRedis())  # type: ignore[arg-type]
    await inflight.add("s", [lease("u1", expires_at=1000.0), lease("u2", expires_at=2000.0)])
    leases = await inflight.get_many("s", ["u1", "u2", "u3"])
    assert sorted(leases) == ["u1", "u2"] and await inflight.get_many("s", []) == {}
    assert live(leases["u1"], 1000.0 - LEASE_GUARD_S - 1) == lease("u1", 1000.0)
    assert live(leases["u1"], 1000.0 - LEASE_GUARD_S) is None and live(leases["u2"], 1500.0) is not None
    assert live(None, 0.0) is None

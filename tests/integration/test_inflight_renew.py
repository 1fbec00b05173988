"""Lease renewal against a real Redis: the binder renews the leases of the binds it is still applying, and only
where Redis holds them as it read them (atomically: a Lua compare-and-set)."""

from __future__ import annotations

import time
import uuid

from redis.asyncio import Redis

from shoal.adapters.inflight import LEASE_GUARD_S, InFlight
from shoal.messages.snapshot import InFlightBind


def lease(uid: str, *, plan: str = "p1", expires_at: float, ttl_s: float = 60.0) -> InFlightBind:
    return InFlightBind(pod=f"ns/{uid}", pod_uid=uid, node="n1", gpu_groups=("g1",), plan_id=plan,
                        expires_at=expires_at, ttl_s=ttl_s)


async def test_only_leases_held_as_read_and_still_live_are_renewed(redis: Redis) -> None:
    shard, now = f"renew-{uuid.uuid4().hex[:8]}", time.time()
    inflight = InFlight(redis)
    kept, removed, replaced = (lease(u, expires_at=now + 20) for u in ("kept", "removed", "replaced"))
    running_out = lease("running-out", expires_at=now + LEASE_GUARD_S - 1)
    no_ttl = lease("no-ttl", expires_at=now + 20, ttl_s=0.0)
    await inflight.add(shard, [kept, removed, replaced, running_out, no_ttl])
    await inflight.remove(shard, ["removed"])  # its bind failed, or the pod was seen bound
    later = lease("replaced", plan="p2", expires_at=now + 50)
    await inflight.add(shard, [later])  # a later plan's, after the first lease expired

    renewed = await inflight.renew(shard, [kept, removed, replaced, running_out, no_ttl], now_s=now)

    assert [e.pod_uid for e in renewed] == ["kept"]
    assert renewed[0].expires_at == now + 60 and renewed[0].plan_id == "p1"
    stored = {e.pod_uid: e for e in await inflight.all(shard)}
    assert stored["kept"] == renewed[0]
    assert "removed" not in stored
    assert stored["replaced"] == later  # never overwritten by the older plan's renewal
    assert stored["running-out"] == running_out and stored["no-ttl"] == no_ttl
    # renewed again from what was renewed: the stored value is the new one
    again = await inflight.renew(shard, renewed, now_s=now + 30)
    assert [e.expires_at for e in again] == [now + 90]
    assert await inflight.renew(shard, [kept], now_s=now + 30) == []  # the value read first is not held any more

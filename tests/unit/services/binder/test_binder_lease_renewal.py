"""A plan the binder takes longer to apply than a lease lasts keeps its leases: the binder renews those of the
binds not done yet, each when half its time is up (seen: a 5,000-bind plan took 58 s on a busy apiserver, its
leases ran out at 55 s, and 1,525 of its pods were planned again while their first binds were still going out)."""

from __future__ import annotations

import asyncio
import time

from services.binder.handlers import Binder
from shoal.adapters.inflight import LEASE_GUARD_S, live
from shoal.adapters.kafka import Delivery
from shoal.core.plan import Bind
from shoal.errors import TransientError
from shoal.messages.base import new_meta
from shoal.messages.plan import PlanIssued
from shoal.messages.snapshot import InFlightBind
from shoal.metrics import Metrics
from tests.unit.services.binder.test_binder_plan import FakeKube, FakeSeen, pods

DELIVERY = Delivery(topic="plans", partition=0, offset=0, key=None, headers=(), timestamp_ms=0)


class RenewingInFlight:
    """Leases as Redis holds them; `renew` replaces a lease only where it is held as given and still live."""

    def __init__(self, entries: dict[str, InFlightBind], failures: int = 0):
        self.entries = entries
        self.renewals: list[list[str]] = []
        self.failures = failures

    async def get(self, shard, pod_uid):
        return live(self.entries.get(pod_uid))

    async def get_many(self, shard, pod_uids):
        return {u: self.entries[u] for u in pod_uids if u in self.entries}

    async def remove(self, shard, pod_uids):
        return sum(self.entries.pop(u, None) is not None for u in pod_uids)

    async def renew(self, shard, leases, *, now_s=None):
        now = time.time() if now_s is None else now_s
        if self.failures:
            self.failures -= 1
            raise TransientError("redis: connection refused")
        self.renewals.append(sorted(e.pod_uid for e in leases))
        out = []
        for e in leases:
            if self.entries.get(e.pod_uid) == e and live(e, now) is not None and e.ttl_s > 0:
                self.entries[e.pod_uid] = out_entry = InFlightBind(
                    pod=e.pod, pod_uid=e.pod_uid, node=e.node, plan_id=e.plan_id, expires_at=now + e.ttl_s,
                    ttl_s=e.ttl_s)
                out.append(out_entry)
        return out


class SlowBindings(FakeKube):
    """The first binding takes `delay_s`: the apiserver is busy."""

    def __init__(self, delay_s: float):
        super().__init__(pods(3))
        self.delay_s = delay_s

    async def create(self, resource, body, *, namespace=None, name=None, subresource=None, **kwargs):
        if subresource == "binding" and not self.bindings:
            self.bindings.append(body)
            await asyncio.sleep(self.delay_s)
            self.bound.add(f"{namespace}/{name}")
            return body
        return await super().create(resource, body, namespace=namespace, name=name, subresource=subresource)


class Bus:
    async def publish(self, topic, message, *, key=None, headers=None):
        return 0, 0


def plan_and_leases(n: int, expires_in_s: float, ttl_s: float = 60.0):
    binds = [Bind(pod=f"ns/p{i}", pod_uid=f"uid-{i}", node="n1") for i in range(n)]
    now = time.time()
    leases = {b.pod_uid: InFlightBind(pod=b.pod, pod_uid=b.pod_uid, node="n1", plan_id="plan-1",
                                      expires_at=now + expires_in_s, ttl_s=ttl_s) for b in binds}
    plan = PlanIssued(meta=new_meta("planner", revision=1, id="plan-1"), shard="pool", plan_id="plan-1", revision=1,
                      ops=tuple(binds))
    return plan, leases


def one_at_a_time(kube, inflight) -> Binder:
    return Binder(kube=kube, inflight=inflight, seen=FakeSeen(), bus=Bus(), metrics=Metrics(), parallel=1)


async def test_a_bind_that_goes_out_after_its_first_lease_would_have_run_out_still_binds():
    # p1's bind starts after p0's, 0.8 s later: by then its first lease has less than the guard left
    plan, leases = plan_and_leases(2, expires_in_s=LEASE_GUARD_S + 0.5)
    kube, inflight = SlowBindings(delay_s=0.8), RenewingInFlight(dict(leases))
    started = time.time()
    await asyncio.wait_for(one_at_a_time(kube, inflight).on_plan(plan, DELIVERY), 5)
    assert kube.bound == {"ns/p0", "ns/p1"}
    assert inflight.renewals == [["uid-0", "uid-1"]]  # at once (less than half its time left), then no more
    assert inflight.entries["uid-1"].expires_at >= started + 60


async def test_a_failed_renewal_is_tried_again():
    plan, leases = plan_and_leases(2, expires_in_s=LEASE_GUARD_S + 1.6)
    kube, inflight = SlowBindings(delay_s=1.3), RenewingInFlight(dict(leases), failures=1)
    await asyncio.wait_for(one_at_a_time(kube, inflight).on_plan(plan, DELIVERY), 5)
    assert kube.bound == {"ns/p0", "ns/p1"}
    assert inflight.renewals == [["uid-0", "uid-1"]]  # the second try, a second later (p0's bind still under way)


async def test_leases_with_time_to_spare_or_held_by_a_later_plan_are_not_renewed():
    plan, leases = plan_and_leases(3, expires_in_s=LEASE_GUARD_S + 0.5)
    later = InFlightBind(pod="ns/p2", pod_uid="uid-2", node="n2", plan_id="plan-2", expires_at=time.time() + 60,
                         ttl_s=60)
    inflight = RenewingInFlight({**leases, "uid-2": later})  # p2 was planned again, by a later plan
    kube = SlowBindings(delay_s=0.8)
    await asyncio.wait_for(one_at_a_time(kube, inflight).on_plan(plan, DELIVERY), 5)
    assert kube.bound == {"ns/p0", "ns/p1"}  # p2's bind is the later plan's
    assert inflight.entries["uid-2"] == later

    plan, leases = plan_and_leases(2, expires_in_s=60)  # a plan applied well within its leases
    inflight = RenewingInFlight(dict(leases))
    await asyncio.wait_for(one_at_a_time(FakeKube(pods(2)), inflight).on_plan(plan, DELIVERY), 5)
    assert inflight.renewals == [] and inflight.entries == leases

"""Queue status: written when the figures change, at most once per `queue_status_interval_s` per queue, the
newest figures last (a stream of plans moves them every plan; every write is an etcd write and a watch event)."""

from __future__ import annotations

import asyncio

from services.binder.handlers import Binder
from shoal.core.plan import QueueFigures, ResourceFigures
from shoal.messages.base import new_meta
from shoal.messages.plan import PlanIssued
from shoal.metrics import Metrics


class QueueKube:
    """Records Queue status patches; `written` is set at each."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict]] = []
        self.written = asyncio.Event()

    async def patch(self, resource, name, body, **kwargs):
        assert resource.plural == "queues" and kwargs.get("subresource") == "status"
        self.patches.append((name, body["status"]))
        self.written.set()
        return None


def plan(number: int, shard: str = "pool", **allocated: int) -> PlanIssued:
    return PlanIssued(meta=new_meta("planner", revision=number, id=f"plan-{number}"), shard=shard,
                      plan_id=f"plan-{number}", revision=number, ops=(),
                      queues=tuple(QueueFigures(name=q, gpu=ResourceFigures(allocated=gpus * 1000, request=gpus * 1000))
                                   for q, gpus in allocated.items()))


def binder(kube: QueueKube, interval_s: float) -> Binder:
    return Binder(kube=kube, inflight=None, seen=None, bus=None, metrics=Metrics(),  # type: ignore[arg-type]
                  queue_status_interval_s=interval_s)


def gpus(status: dict) -> str:
    return status["allocated"]["nvidia.com/gpu"]


async def next_write(kube: QueueKube, timeout_s: float = 10.0) -> None:
    kube.written.clear()
    await asyncio.wait_for(kube.written.wait(), timeout_s)


async def test_figures_that_change_within_the_interval_wait_and_only_the_newest_are_written():
    kube = QueueKube()
    b = binder(kube, interval_s=0.3)
    await b.queue_statuses(plan(1, a=1))
    assert [(n, gpus(s)) for n, s in kube.patches] == [("a", "1")]  # the first change is written at once
    kube.written.clear()
    await b.queue_statuses(plan(2, a=2))
    await b.queue_statuses(plan(3, a=3))
    assert len(kube.patches) == 1  # within the interval: waiting
    await asyncio.wait_for(kube.written.wait(), 10)
    assert [(n, gpus(s)) for n, s in kube.patches] == [("a", "1"), ("a", "3")]  # plan 2's figures never written
    await asyncio.sleep(0.5)
    assert len(kube.patches) == 2  # nothing else was waiting


async def test_figures_back_to_what_is_written_cancel_the_waiting_write():
    kube = QueueKube()
    b = binder(kube, interval_s=0.3)
    await b.queue_statuses(plan(1, a=1))
    await b.queue_statuses(plan(2, a=2))
    await b.queue_statuses(plan(3, a=1))  # as written: the waiting figures are dropped
    await asyncio.sleep(0.6)
    assert [gpus(s) for _, s in kube.patches] == ["1"]


async def test_each_queue_has_its_own_interval():
    kube = QueueKube()
    b = binder(kube, interval_s=60.0)
    await b.queue_statuses(plan(1, a=1))
    await b.queue_statuses(plan(2, a=2, b=5))  # a waits (written just now); b was never written: at once
    assert [(n, gpus(s)) for n, s in kube.patches] == [("a", "1"), ("b", "5")]
    assert set(b._queue_due) == {"a"}
    b._queue_timer.cancel()


async def test_no_interval_writes_every_change():
    kube = QueueKube()
    b = binder(kube, interval_s=0.0)
    for number, allocated in enumerate((1, 2, 2, 3), start=1):
        await b.queue_statuses(plan(number, a=allocated))
    assert [gpus(s) for _, s in kube.patches] == ["1", "2", "3"]  # unchanged figures are not written again


async def test_a_queue_whose_last_pod_finished_shows_zero_but_another_pools_zeros_never_overwrite():
    kube = QueueKube()
    b = binder(kube, interval_s=0.0)
    await b.queue_statuses(plan(1, a=2))
    await b.queue_statuses(plan(2, shard="other", a=0))  # nothing of a's in that pool: pool's figures stay
    assert [gpus(s) for _, s in kube.patches] == ["2"]
    await b.queue_statuses(plan(3, a=0))  # a's last pod in pool finished
    assert [gpus(s) for _, s in kube.patches] == ["2", "0"]
    await b.queue_statuses(plan(4, a=0))
    await b.queue_statuses(plan(5, shard="other", b=0))  # never used anywhere: never written
    assert [(n, gpus(s)) for n, s in kube.patches] == [("a", "2"), ("a", "0")]

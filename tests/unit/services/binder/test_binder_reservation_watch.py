"""A bind into a new shared GPU is woken by the watch event that brings the reservation pod's GPU id."""

from __future__ import annotations

import asyncio
import time

from services.binder.reservation_watch import RESERVE_ANNOTATION, ReservationWatch


def reservation(name: str, uuid: str | None = None) -> dict:
    annotations = {RESERVE_ANNOTATION: uuid} if uuid else {}
    return {"metadata": {"name": name, "namespace": "kai-resource-reservation", "annotations": annotations}}


async def test_a_waiter_wakes_on_the_event_that_brings_the_gpu_id_not_after_its_timeout():
    watch = ReservationWatch(None, "kai-resource-reservation")  # type: ignore[arg-type]
    watch._take(reservation("r1"))
    assert watch.uuids == {}

    async def node_agent_writes_it() -> None:
        await asyncio.sleep(0.05)
        watch._take(reservation("r1", "GPU-1"))
        watch._wake()

    started = time.monotonic()
    writer = asyncio.create_task(node_agent_writes_it())
    await watch.changed(timeout_s=5.0)
    await writer
    assert time.monotonic() - started < 1.0 and watch.uuids == {"r1": "GPU-1"}
    watch._take(reservation("r1", "GPU-1"), deleted=True)
    assert watch.uuids == {}


async def test_a_change_that_lands_while_the_waiter_looks_is_not_missed():
    """Seen in the benchmark: the GPU id arrived while the binder read the reservation pod; it then waited on
    the next change and slept its full second. The event taken before looking is already set."""
    watch = ReservationWatch(None, "kai-resource-reservation")  # type: ignore[arg-type]
    change = watch.next_change()
    assert watch.uuids.get("r1") is None
    watch._take(reservation("r1", "GPU-1"))  # lands while the waiter is busy (e.g. reading the pod)
    watch._wake()
    started = time.monotonic()
    await watch.changed(timeout_s=5.0, change=change)
    assert time.monotonic() - started < 1.0 and watch.uuids == {"r1": "GPU-1"}


def test_the_watch_keeps_the_reservation_pods_the_release_sync_reads():
    watch = ReservationWatch(None, "kai-resource-reservation")  # type: ignore[arg-type]
    watch._take(reservation("r1"))
    watch._take(reservation("r2", "GPU-2"))
    assert sorted(watch.pods) == ["r1", "r2"] and watch.pods["r2"]["metadata"]["annotations"] == {
        RESERVE_ANNOTATION: "GPU-2"}
    watch._take(reservation("r1"), deleted=True)
    assert sorted(watch.pods) == ["r2"]

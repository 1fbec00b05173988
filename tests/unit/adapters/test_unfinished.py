"""Work left running per partition: counted in offset order, the first still running stops the count."""

from __future__ import annotations

import asyncio

import pytest

from shoal.adapters.unfinished import Unfinished


async def test_finished_work_counts_front_to_back_and_stops_at_the_first_still_running():
    loop = asyncio.get_running_loop()
    unfinished = Unfinished(depth=3)
    futures = [loop.create_future() for _ in range(3)]
    for offset, future in enumerate(futures):
        unfinished.add("tp", offset, future)
    futures[1].set_result(None)
    assert list(unfinished.finished("tp")) == []  # 0 still runs: 1 waits behind it
    futures[0].set_exception(RuntimeError("boom"))
    got = list(unfinished.finished("tp"))
    assert [offset for offset, _ in got] == [0, 1] and isinstance(got[0][1], RuntimeError) and got[1][1] is None
    assert unfinished.partitions() == ["tp"] and not unfinished.empty("tp")
    futures[2].cancel()
    assert [type(e) for _, e in unfinished.finished("tp")] == [asyncio.CancelledError]
    assert unfinished.empty("tp") and unfinished.partitions() == []


async def test_room_waits_only_when_depth_messages_are_under_way_and_drain_waits_for_all():
    loop = asyncio.get_running_loop()
    unfinished = Unfinished(depth=2)
    first, second = loop.create_future(), loop.create_future()
    unfinished.add("tp", 0, first)
    await asyncio.wait_for(unfinished.room("tp"), 1)  # one under way: room for another
    unfinished.add("tp", 1, second)
    waiting = asyncio.create_task(unfinished.room("tp"))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    first.set_result(None)
    await asyncio.wait_for(waiting, 1)
    draining = asyncio.create_task(unfinished.drain())
    await asyncio.sleep(0.01)
    assert not draining.done()
    second.set_result(None)
    await asyncio.wait_for(draining, 1)
    unfinished.discard("tp")
    assert unfinished.empty("tp")
    with pytest.raises(ValueError):
        Unfinished(depth=0)

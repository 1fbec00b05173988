"""Work a Kafka handler left running, per partition, in offset order.

A handler may hand back the rest of its work as a future and let the next message start (the binder applies
the next plan's binds while the previous plan's events are written). An offset counts as done only when its
own work and that of every earlier offset of its partition have finished, so a crash or a rebalance never
commits past unfinished work: at-least-once still holds, with up to `depth` messages per partition under way.

    unfinished = Unfinished(depth=4)
    await unfinished.room(tp)                 # wait while `depth` are under way
    unfinished.add(tp, record, future)
    for record, error in unfinished.finished(tp): ...   # front to back, stops at the first still running
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any


class Unfinished:
    def __init__(self, depth: int = 1) -> None:
        if depth < 1:
            raise ValueError("depth must be at least 1")
        self.depth = depth
        self._work: dict[Any, deque[tuple[Any, asyncio.Future]]] = {}

    def partitions(self) -> list[Any]:
        return [tp for tp, work in self._work.items() if work]

    def empty(self, tp: Any) -> bool:
        return not self._work.get(tp)

    def add(self, tp: Any, record: Any, future: asyncio.Future) -> None:
        self._work.setdefault(tp, deque()).append((record, future))

    async def room(self, tp: Any) -> None:
        """With `depth` messages of `tp` under way, wait until the oldest has finished (`finished` then
        pops it, which makes room)."""
        work = self._work.get(tp)
        if work and len(work) >= self.depth and not work[0][1].done():
            await asyncio.wait([work[0][1]])

    def finished(self, tp: Any) -> Iterator[tuple[Any, BaseException | None]]:
        """Pop the finished work at the front of `tp`, in offset order: (record, its error or None)."""
        work = self._work.get(tp)
        while work and work[0][1].done():
            record, future = work.popleft()
            yield record, asyncio.CancelledError() if future.cancelled() else future.exception()

    async def drain(self, tps: Iterable[Any] | None = None) -> None:
        """Wait for all work of `tps` (all partitions when None) to finish, successfully or not."""
        futures = [f for tp in (self._work if tps is None else tps) for _, f in self._work.get(tp, ())]
        if futures:
            await asyncio.wait(futures)

    def discard(self, tp: Any) -> None:
        """Forget `tp`'s work (after `drain`: its results no longer count, e.g. the partition was revoked)."""
        self._work.pop(tp, None)

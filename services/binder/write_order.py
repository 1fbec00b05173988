"""Plan order per object: a plan's writes that a later plan may overwrite (a PodGroup's condition, annotations
and core pods; a pod's eviction and Unschedulable condition) land after the earlier plans' writes to the same
object, and wait for nothing else. Turns are taken when the plan starts (plans start in plan order), and each
turn is given up when its write is done or the plan's work ends, failed or not, so a later plan never waits
for an earlier one that will not write.

    order = WriteOrder()
    turns = order.take(shard, ops)        # at the plan's start, synchronously
    ...                                   # the plan's binds
    for turn in turns:
        async with turn:                  # after the earlier plans' write to the object; given up after
            await write(turn.op)
    order.release(turns)                  # at the end in any case
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from shoal.core.plan import Annotate, ClearCondition, Evict, PodEvent, SetCondition, SetCorePods


def object_of(shard: str, op: Any) -> tuple[str, str]:
    """The object `op` writes (kind, namespace/name); an op of another kind is ordered against all of its
    shard's plans' ops of that kind."""
    if isinstance(op, Annotate | SetCondition | ClearCondition | SetCorePods):
        return "PodGroup", op.pod_group
    if isinstance(op, Evict | PodEvent):
        return "Pod", op.pod
    return type(op).__name__, shard


@dataclass
class Turn:
    op: Any
    before: asyncio.Future | None = None  # the previous plan's turn on the same object
    mine: asyncio.Future | None = None  # None: an op nothing orders (`Turn(op)`)

    async def __aenter__(self) -> Turn:
        if self.before is not None:
            await asyncio.wait([self.before])  # its failure is its own (the consumer rewinds to its plan)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.done()

    def done(self) -> None:
        if self.mine is not None and not self.mine.done():
            self.mine.set_result(None)


class WriteOrder:
    def __init__(self) -> None:
        self._last: dict[tuple[str, str], asyncio.Future] = {}  # object → the latest turn taken on it

    def take(self, shard: str, ops: Iterable[Any]) -> list[Turn]:
        loop = asyncio.get_running_loop()
        turns = []
        for op in ops:
            key = object_of(shard, op)
            mine = loop.create_future()
            turns.append(Turn(op, self._last.get(key), mine))
            self._last[key] = mine
            mine.add_done_callback(functools.partial(self._forget, key))
        return turns

    def _forget(self, key: tuple[str, str], done: asyncio.Future) -> None:
        if self._last.get(key) is done:
            del self._last[key]

    @staticmethod
    def release(turns: Iterable[Turn]) -> None:
        for turn in turns:
            turn.done()

    def __len__(self) -> int:
        return len(self._last)

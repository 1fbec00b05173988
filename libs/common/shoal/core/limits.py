"""Queue limits inside an eviction scenario (preempt and reclaim check OverLimit with the victims gone).

Victims lower the allocation of every queue above them, so a job whose queue path is at its limit may
still be placed when its victims sit under the queue that is over: a preemptor's victims are in its own
leaf queue (they lower every level); a reclaimer's victims are in other leaves and lower only the
ancestors the two share. `Excess` says, before the search, which queue would be over by how much with
the job placed and which chunks lower it; `within_limits` is the scenario's final check on the live
figures. Only victims on the nodes the job takes are kept (SPEC §4), so the solver places such a job on
its victims' nodes.
"""

from __future__ import annotations

from collections.abc import Iterable

from shoal.core.allocate import fair_request
from shoal.core.context import Context
from shoal.core.queue_order import queue_path
from shoal.core.session import Job, Task
from shoal.core.victims import Chunk


def _path(ctx: Context, queue: str) -> list[str]:
    return [share.name for share in queue_path(ctx.shares, queue)]


class Excess:
    """What the queues on a job's path would hold above their limits with the job placed, and which
    chunks lower it: a chunk of a queue under the over-limit one that frees the resource that is over."""

    def __init__(self, ctx: Context, job: Job, tasks: list[Task]) -> None:
        request = fair_request(tasks).values()
        self.ctx = ctx
        self.over: dict[str, tuple[int, int, int]] = {}
        for name in _path(ctx, job.queue):
            limit = ctx.shares[name].limit.values()
            alloc = ctx.session.queues[name].alloc
            excess = tuple(used + asked - cap if asked > 0 and cap >= 0 and used + asked > cap else 0
                           for cap, used, asked in zip(limit, alloc, request, strict=True))
            if any(excess):
                self.over[name] = excess  # type: ignore[assignment]
        self._paths: dict[str, set[str]] = {}

    def __bool__(self) -> bool:
        return bool(self.over)

    def _above(self, queue: str) -> set[str]:
        got = self._paths.get(queue)
        if got is None:
            got = self._paths[queue] = set(_path(self.ctx, queue))
        return got

    def frees(self, chunk: Chunk) -> bool:
        above = self._above(chunk.job.queue)
        freed = chunk.resources.values()
        return any(name in above and any(e > 0 and v > 0 for e, v in zip(excess, freed, strict=True))
                   for name, excess in self.over.items())

    def covered(self, chunks: Iterable[Chunk]) -> bool:
        """The chunks free at least the excess of every over-limit queue (a necessary condition)."""
        left = self.left()
        for chunk in chunks:
            self.take(left, chunk)
        return self.done(left)

    def left(self) -> dict[str, list[int]]:
        """A running tally of what is still to free (`take` a chunk, ask `done`)."""
        return {name: list(excess) for name, excess in self.over.items()}

    def take(self, left: dict[str, list[int]], chunk: Chunk) -> None:
        above = self._above(chunk.job.queue)
        freed = chunk.resources.values()
        for name, need in left.items():
            if name in above:
                for i in range(3):
                    need[i] -= freed[i]

    @staticmethod
    def done(left: dict[str, list[int]]) -> bool:
        return all(v <= 0 for need in left.values() for v in need)


def within_limits(ctx: Context, job: Job, tasks: list[Task]) -> bool:
    """Every queue on the job's path is within its limit, in the resources the job asks for, with the
    scenario's allocations (live figures: victims gone, job placed)."""
    asked = [v > 0 for v in fair_request(tasks).values()]
    for name in _path(ctx, job.queue):
        limit = ctx.shares[name].limit.values()
        alloc = ctx.session.queues[name].alloc
        for cap, used, sel in zip(limit, alloc, asked, strict=True):
            if sel and cap >= 0 and used > cap:
                return False
    return True

"""Time windows that protect jobs from evictions (KAI §4.6) and keep preemptors waiting (S27).

Min-runtime: a victim whose PodGroup started (`kai.scheduler/last-start-timestamp`) less than its
min-runtime ago is protected; without the annotation there is no protection.
- preempt: the victim queue's `preempt_min_runtime_s`, walking up its ancestors; else the shard default.
- reclaim, method `lca` (default): the queue one level below the lowest common ancestor of the
  reclaimer's and the victim's queues, on the victim's side; its `reclaim_min_runtime_s`, else walking up
  from there; else the shard default. Method `queue`: walk up from the victim's own queue.

Preemption delay (KAI v0.17, #1832): a job with `preemption_delay_s` may not trigger evictions
(preempt, reclaim, consolidation) before its PodGroup's creation time plus the delay; the window re-arms
after each eviction it triggered (`kai.scheduler/last-eviction-timestamp`, stamped by the solver's
commit). Allocation into free capacity is unaffected. Times are epoch seconds from the snapshot
(`snapshot.now` is data).
"""

from __future__ import annotations

from shoal.core.session import Job, QueueState, Session, epoch_of
from shoal.core.timetext import go_duration, rfc3339

PREEMPTION_DELAY_NOT_ELAPSED = "PreemptionDelayNotElapsed"


def _walk_up(queue: QueueState | None, attr: str) -> int | None:
    while queue is not None:
        value = getattr(queue.queue, attr)
        if value is not None:
            return value
        queue = queue.parent
    return None


def preempt_min_runtime(session: Session, victim: Job) -> int:
    got = _walk_up(session.queues.get(victim.queue), "preempt_min_runtime_s")
    return session.config.preempt_min_runtime_s if got is None else got


def reclaim_min_runtime(session: Session, reclaimer_queue: str, victim_queue_name: str) -> int:
    victim_queue = session.queues.get(victim_queue_name)
    start = victim_queue
    if session.config.reclaim_resolve_method != "queue" and victim_queue is not None:
        reclaimer = session.queues.get(reclaimer_queue)
        ancestors = {q.name for q in reclaimer.chain} if reclaimer is not None else set()
        for below, above in zip(victim_queue.chain, victim_queue.chain[1:], strict=False):
            if above.name in ancestors:
                start = below
                break
        else:
            start = victim_queue.chain[-1] if victim_queue.chain else victim_queue
    got = _walk_up(start, "reclaim_min_runtime_s")
    return session.config.reclaim_min_runtime_s if got is None else got


def is_protected(session: Session, victim: Job, min_runtime_s: int) -> bool:
    """The victim started less than `min_runtime_s` ago (no start stamp: not protected)."""
    started = victim.group.last_start_timestamp
    if not started or min_runtime_s <= 0:
        return False
    return session.now < epoch_of(started) + min_runtime_s


def preemption_delay_end(session: Session, job: Job) -> float | None:
    """The epoch before which the job may not trigger evictions, or None when it may."""
    delay = job.group.preemption_delay_s
    if not delay or delay <= 0:
        return None
    start = job.created
    last = job.group.last_eviction_timestamp
    if last:
        start = max(start, epoch_of(last))  # the window re-arms after each eviction it triggered
    end = start + delay
    return end if session.now < end else None


def preemption_delay_message(delay_s: int, end: float) -> str:
    return (
        f"Workload is within its preemption delay window ({go_duration(delay_s)}) and may not trigger "
        f"evictions before {rfc3339(end)}"
    )

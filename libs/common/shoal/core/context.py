"""What every action works on during one cycle: the session, its statement, node filter, fair shares and
the outcomes to report (conditions, events). Core II actions (reclaim, preempt, consolidation, stale
gang eviction) get the same context.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from shoal.core import semipreemptible
from shoal.core.fairshare import (
    FairShareResult,
    QueueInput,
    QueueShare,
    ShareResource,
    ShareUsage,
    divide_fair_share,
)
from shoal.core.placement import NodeFilter
from shoal.core.plan import ConditionReason, QueueDetails
from shoal.core.queue_order import record_allocation
from shoal.core.resources import Resources
from shoal.core.session import Job, Session, Task
from shoal.core.statement import Change, Statement
from shoal.core.victims import VictimPool


class JobOutcome:
    """Why a job was not (fully) scheduled this cycle."""

    __slots__ = ("reasons", "per_pod_fit", "not_ready")

    def __init__(self) -> None:
        self.reasons: list[ConditionReason] = []  # every verdict of the cycle, the last one counts
        self.per_pod_fit: str | None = None  # fit error when the message is the per-pod one
        self.not_ready: str | None = None

    def refuse(self, reason: str, message: str, details: QueueDetails | None = None) -> None:
        """One more verdict against the job: why it was not placed (KAI's condition reason, its message and, for
        a queue's limit or quota, the queue's figures)."""
        self.reasons.append(ConditionReason(reason=reason, message=message, details=details))


def _created_key(value: str | int) -> str:
    return value if isinstance(value, str) else f"{value:020d}"


def queue_inputs(session: Session) -> list[QueueInput]:
    """The fairshare helper's inputs from the session: own (not rolled-up) request/allocated per queue."""
    own = session.own
    usage = {u.queue: u for u in session.config.usage}
    out = []
    for name, qs in session.queues.items():
        q = qs.queue
        u = usage.get(name)
        req, alloc, np = own[name]
        out.append(
            QueueInput(
                name=name,
                parent=q.parent or None,
                priority=q.priority,
                creation_key=_created_key(q.created),
                cpu=ShareResource(q.cpu.quota, q.cpu.limit, q.cpu.weight),
                memory=ShareResource(q.memory.quota, q.memory.limit, q.memory.weight),
                gpu=ShareResource(q.gpu.quota, q.gpu.limit, q.gpu.weight),
                request=Resources(*req),
                allocated=Resources(*alloc),
                allocated_non_preemptible=Resources(*np),
                usage=ShareUsage(u.cpu, u.memory, u.gpu) if u is not None else ShareUsage(),
                display_name=q.display_name,
            )
        )
    return out


class Context:
    def __init__(self, session: Session, fair: FairShareResult | None = None, *, bind_cap: int = 0) -> None:
        self.session = session
        self.statement = Statement(session)
        self.nodes = NodeFilter(session)
        semipreemptible.count_cores(session)
        if fair is None:
            cpu, mem, gpu = session.total_capacity()
            fair = divide_fair_share(queue_inputs(session), Resources(cpu, mem, gpu), session.config.k_value)
        self.fair = fair
        self.shares: dict[str, QueueShare] = dict(fair.queues)
        self.total = fair.total
        self.outcomes: dict[str, JobOutcome] = {}
        self.accepted: list[Change] = []  # committed placement/eviction ops in decision order
        self.job_ops: dict[str, list[Change]] = {}
        self.moved: list[Change] = []  # consolidation's re-placements of the pods it moves (not in the plan)
        self.status_ops: list = []  # Annotate / PodGroupEvent ops from the eviction actions (core II)
        self.counters: dict[str, int] = {}  # e.g. victims simulated per action, budget stops (core II)
        self.bind_cap = bind_cap  # allocate places no further job once this many pods are placed (0: no cap)
        self.binds = 0  # pods placed by allocate this cycle
        self.capped = False  # allocate stopped at the cap: the cycle ends there, the next goes on
        self._victims: VictimPool | None = None

    def victim_pool(self) -> VictimPool:
        """The cycle's victim candidates, built by the first eviction action and re-ranked for each next
        one (call it when an action starts, with nothing uncommitted)."""
        if self._victims is None:
            self._victims = VictimPool(self.session, self.shares)
        else:
            self._victims.refresh()
        return self._victims

    def action_victims(self) -> Callable[[], VictimPool]:
        """The victim pool of one eviction action, asked for when its first attempt starts (nothing of the
        action committed yet), the same pool for its later attempts: an action no job gets that far with (no
        pending job, or none ready) builds and re-ranks nothing."""
        return functools.cache(self.victim_pool)

    def outcome(self, job: Job) -> JobOutcome:
        out = self.outcomes.get(job.key)
        if out is None:
            out = self.outcomes[job.key] = JobOutcome()
        return out

    def accept(self, ops: list[Change]) -> None:
        """Record committed ops and keep the queue figures used by the policies in step."""
        semi: dict[str, Job] = {}
        for op in ops:
            if op.kind == "convert":  # core II: a marker (allocation -> pipeline), its resources are counted
                continue
            task: Task = op.task
            job = task.job
            if job is None:
                continue
            self.accepted.append(op)
            self.job_ops.setdefault(job.key, []).append(op)
            if op.kind == "allocate":
                self.binds += 1
            sign = -1 if op.kind == "evict" else 1
            delta = Resources(task.cpu * sign, task.mem * sign, task.gpu_fair * sign)
            if job.queue in self.shares:
                record_allocation(self.shares, job.queue, delta, not job.preemptible)
            if job.semi:
                semi[job.key] = job
        for job in semi.values():
            semipreemptible.record_core(self.shares, job)

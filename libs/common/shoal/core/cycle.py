"""The public entry point: `run_cycle(snapshot) -> Plan`.

One cycle = build the session from the snapshot, divide fair share, run the enabled actions in KAI's
order (allocate, consolidation, reclaim, preempt, stalegangeviction), and turn what was committed into
a Plan. The core reads no clock: `run_cycle_timed(snapshot, timer)` takes a timer callable (the CLI
passes `time.perf_counter`) and also returns the durations.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from datetime import UTC, datetime

from shoal.core import (
    allocate,
    background,
    bindbackoff,
    consolidation,
    preempt,
    reasons,
    reclaim,
    semipreemptible,
    stalegang,
)
from shoal.core.context import Context
from shoal.core.gpusharing import portion_text, received_memory_mib
from shoal.core.kept_pass import KeptPass
from shoal.core.model import ANNOTATION_LAST_START, Snapshot
from shoal.core.plan import (
    Annotate,
    Bind,
    ClearCondition,
    CycleTimings,
    Evict,
    Pipeline,
    Plan,
    PodEvent,
    PodGroupEvent,
    QueueFigures,
    Reserve,
    ResourceFigures,
    SetCondition,
    SetCorePods,
    make_plan,
)
from shoal.core.resources import Resources
from shoal.core.session import ACTIVE, PENDING, Session

# KAI action order (priority 500, 400, 300, 200, 100). Core II registers the other four here.
ACTION_ORDER = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
ACTIONS: dict[str, Callable[[Context], None]] = {
    "allocate": allocate.run,
    "consolidation": consolidation.run,
    "reclaim": reclaim.run,
    "preempt": preempt.run,
    "stalegangeviction": stalegang.run,
}


def now_text(now: str | int) -> str:
    if isinstance(now, str):
        return now
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def enabled_actions(snapshot: Snapshot) -> list[str]:
    cfg = snapshot.config
    names = [a for a in ACTION_ORDER if a in cfg.actions]
    if (
        cfg.gpu_placement == "spread"
        or cfg.cpu_placement == "spread"
        or cfg.max_consolidation_preemptees <= 0
    ):
        names = [a for a in names if a != "consolidation"]
    return names


def build_plan(ctx: Context) -> Plan:
    session = ctx.session
    snap = session.snapshot
    ops: list = []
    for op in ctx.accepted:
        task = op.task
        pod = task.pod
        pg = task.job.key if task.job is not None else ""
        if op.kind == "allocate":
            for gid, index in op.new_groups:
                ops.append(Reserve(node=op.node.name, gpu_group=gid, gpu_index=index, compute_mode=pod.compute_mode))
            frac = task.is_fraction
            ops.append(
                Bind(
                    pod=pod.key,
                    pod_uid=pod.uid,
                    node=op.node.name,
                    gpu_groups=op.groups,
                    fraction=portion_text(task) if frac else None,
                    gpus=task.devices if frac else task.gpus,
                    received_resource_type="Fraction" if frac else "Regular",
                    pod_group=pg,
                    compute_mode=pod.compute_mode if frac else None,
                    gpu_memory_mib=received_memory_mib(task) if frac else None,
                    gpu_memory_limit_mib=pod.fraction.gpu_memory_limit_mib if frac and pod.fraction else None,
                )
            )
        elif op.kind == "pipeline":
            ops.append(
                Pipeline(
                    pod=pod.key,
                    pod_uid=pod.uid,
                    node=op.node.name,
                    gpu_groups=op.groups,
                    pod_group=pg,
                    message=reasons.pipelined_event(pod.key, op.node.name),
                )
            )
        elif op.kind == "evict":
            ops.append(
                Evict(
                    pod=pod.key,
                    pod_uid=pod.uid,
                    node=op.node.name,
                    action=op.action,
                    by=op.by,
                    message=op.message,
                    pod_group=pg,
                )
            )
    status: list = []
    stamp = now_text(snap.now)
    # only jobs with something to report: placed/evicted this cycle, a verdict, or a condition to clear
    keys = set(ctx.job_ops) | set(ctx.outcomes)
    keys.update(j.key for j in session.jobs.made_jobs() if j.group.condition_reason)  # made by the build
    for key in sorted(keys):
        job = session.jobs[key]
        job_ops = ctx.job_ops.get(key, ())
        if job.allocated_at_start == 0 and any(o.kind == "allocate" for o in job_ops):
            status.append(Annotate(pod_group=key, key=ANNOTATION_LAST_START, value=stamp))
        out = ctx.outcomes.get(key)
        active = any(t.status in ACTIVE for t in job.tasks)
        if out is not None and out.not_ready:
            status.append(PodGroupEvent(pod_group=key, reason=reasons.NOT_READY, message=out.not_ready))
        if out is not None and out.reasons:
            first = out.reasons[-1:]  # the last attempt's verdict
            message = reasons.condition_message([(r.reason, r.message) for r in first])
            if not active:  # markUnschedulable governs the pods' PodScheduled condition (binder), not this
                status.append(
                    SetCondition(
                        pod_group=key,
                        reason=first[0].reason,
                        message=message,
                        reasons=tuple(first),
                        node_pool=job.group.node_pool,
                    )
                )
            for t in sorted(job.tasks, key=lambda t: t.key):
                if t.status != PENDING:
                    continue
                text = reasons.pod_error(t.key, out.per_pod_fit) if out.per_pod_fit else first[0].message
                status.append(PodEvent(pod=t.key, reason=reasons.UNSCHEDULABLE, message=text, pod_group=key))
        elif active and job.group.condition_reason:
            status.append(ClearCondition(pod_group=key))
    for gi in session.semi_positions:
        job = session.jobs.job_at(gi)
        core = semipreemptible.core_pod_names(job)
        if core != job.group.core_pods:
            status.append(SetCorePods(pod_group=job.key, pods=core))
    status.extend(SetCorePods(pod_group=key) for key in session.stale_cores)
    status.extend(ctx.status_ops)
    return make_plan(snap.revision, ops + status, queue_figures(ctx))


def queue_figures(ctx: Context) -> list[QueueFigures]:
    out = []
    for name in sorted(ctx.shares):
        s = ctx.shares[name]
        figs = {}
        for res, attr in (("cpu", "cpu_milli"), ("memory", "memory_bytes"), ("gpu", "gpu_milli")):
            figs[res] = ResourceFigures(
                deserved=getattr(s.deserved, attr),
                fair_share=getattr(s.fair_share, attr),
                allocated=getattr(s.allocated, attr),
                limit=getattr(s.limit, attr),
                allocated_non_preemptible=getattr(s.allocated_non_preemptible, attr),
                request=getattr(s.request, attr),
            )
        out.append(QueueFigures(name=name, **figs))
    return out


def fair_share_figures(snapshot: Snapshot, kept: KeptPass | None = None) -> tuple[tuple[QueueFigures, ...], Resources]:
    """What the fairshare service publishes for a snapshot: every queue's figures, divided as a cycle divides
    them before its actions (the same Session and Context a cycle builds), and the shard's capacity."""
    ctx = Context(Session(snapshot, kept=kept))
    return tuple(queue_figures(ctx)), ctx.total


def run_cycle_timed(
    snapshot: Snapshot, timer: Callable[[], float] | None = None, *, eager_jobs: bool = False,
    kept: KeptPass | None = None, bind_cap: int = 0,
) -> tuple[Plan, CycleTimings]:
    """`eager_jobs=True` makes every job while building the session instead of on first use (the same
    plan, slower: the reference the lazy build is tested against). `kept`: the pod pass kept from the
    shard's earlier cycles (`kept_pass.KeptPass`, brought up to date by this one; the same plan).
    `bind_cap` > 0: allocate places no further job once the cycle has placed that many pods (a job is
    placed whole, past the cap if need be), and a cycle that stopped there with jobs left ends after
    allocate (counter `allocate.capped`): no eviction action runs for jobs allocate never tried, and the
    planner plans again at once, on the binds now in flight."""
    # The cycle allocates ~1 object per pod and frees nothing until it ends: the cyclic GC would rescan
    # the whole snapshot many times (2/3 of the build time at 140k pods), so it is paused for the cycle.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _run(snapshot, timer, eager_jobs, kept, bind_cap)
    finally:
        if was_enabled:
            gc.enable()


def _run(snapshot: Snapshot, timer: Callable[[], float] | None, eager_jobs: bool,
         kept: KeptPass | None, bind_cap: int = 0) -> tuple[Plan, CycleTimings]:
    clock = timer if timer is not None else (lambda: 0.0)
    t0 = clock()
    session = Session(snapshot, eager_jobs=eager_jobs, kept=kept)
    ctx = Context(session, bind_cap=bind_cap)
    t1 = clock()
    durations: dict[str, float] = {}
    for name in enabled_actions(snapshot):
        fn = ACTIONS.get(name)
        a0 = clock()
        if fn is not None:
            fn(ctx)
        durations[name] = round((clock() - a0) * 1000.0, 3)
        if ctx.capped:
            ctx.counters["allocate.capped"] = 1
            break
    background.restore(ctx)
    bindbackoff.clear_recovered(ctx)
    plan = build_plan(ctx)
    t2 = clock()
    timings = CycleTimings(
        snapshot_build_ms=round((t1 - t0) * 1000.0, 3),
        total_duration_ms=round((t2 - t0) * 1000.0, 3),
        action_durations_ms=durations,
        counters=dict(sorted(ctx.counters.items())),
    )
    return plan, timings


def run_cycle(snapshot: Snapshot, timer: Callable[[], float] | None = None, *, eager_jobs: bool = False,
              kept: KeptPass | None = None, bind_cap: int = 0) -> Plan:
    return run_cycle_timed(snapshot, timer, eager_jobs=eager_jobs, kept=kept, bind_cap=bind_cap)[0]

"""GPU memory policing: over-share reports, enforcement kills and dynamic-fraction reclaim (pure).

`evaluate(bindings, attribution, state, now, config)` returns decisions and the next state; time is
passed in. Rules:
- Over share: a pod using more than its limit (+ a per-process context allowance) on a GPU gets one
  `GPUMemoryOverShare` report when the episode starts; with policy `enforce` its largest process on
  that GPU is killed once the pod has been over for `grace_s` (`GPUMemoryLimitExceeded`).
- Reclaim (dynamic fractions, policy `report` or `enforce`): when an owner below its request is
  growing and the GPU lacks the free memory to give it its request back, borrowers (pods over their
  request) lose one process each tick, lowest priority / most borrowed / newest first
  (`GPUMemoryReclaimed`, GPUOOMKiller semantics: the process, not the pod). Under `report` the
  same decision is only reported.
- Safety: no kill while the sample is partial or a candidate's memory figure is unknown; a pod within
  its share (or, for reclaim, within its request) is never a victim; at most one kill per GPU until
  the killed process is gone or `release_timeout_s` passed. Decisions carry the process start time,
  and the killer re-checks it, so a reused PID is never killed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from services.nodeagent.binding import Attribution, GpuBinding, PodUsage, ProcUsage
from services.nodeagent.shares import ShareSpec

POLICIES = ("off", "report", "enforce")


@dataclass(frozen=True)
class PolicyConfig:
    policy: str = "report"
    grace_s: float = 10.0
    context_allowance_mib: int = 0
    headroom_mib: int = 0
    release_timeout_s: float = 10.0
    reclaim_window_s: float = 30.0
    dynamic_fractions: bool = True


@dataclass(frozen=True)
class Report:
    pod_key: str
    gpu_uuid: str
    reason: str
    message: str


@dataclass(frozen=True)
class Kill:
    pid: int
    start_ticks: int
    pod_key: str
    gpu_uuid: str
    reason: str
    message: str


@dataclass(frozen=True)
class PolicyState:
    over_since: dict[tuple[str, str], float] = field(default_factory=dict)  # (pod uid, gpu) → since
    last_used: dict[tuple[str, str], int] = field(default_factory=dict)
    last_pids: dict[tuple[str, str], frozenset[int]] = field(default_factory=dict)
    needing_since: dict[tuple[str, str], float] = field(default_factory=dict)
    pending_kill: dict[str, tuple[int, float]] = field(default_factory=dict)  # gpu → (pid, at)
    reclaim_reported: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Outcome:
    decisions: tuple[Report | Kill, ...]
    state: PolicyState
    over_share_mib: dict[tuple[str, str], int]  # (pod uid, gpu) → MiB above the limit (0 when within)


def _largest(usage: PodUsage) -> ProcUsage | None:
    known = [p for p in usage.processes if p.used_mib is not None]
    return max(known, key=lambda p: (p.used_mib or 0, p.pid)) if known else None


def _covering(usage: PodUsage, deficit: int) -> ProcUsage | None:
    """The smallest single process that covers the deficit, else the largest."""
    known = sorted((p for p in usage.processes if p.used_mib is not None), key=lambda p: (p.used_mib or 0, p.pid))
    for proc in known:
        if (proc.used_mib or 0) >= deficit:
            return proc
    return known[-1] if known else None


def _allowance(config: PolicyConfig, usage: PodUsage) -> int:
    return config.context_allowance_mib * len(usage.processes)


def evaluate(
    bindings: Iterable[GpuBinding],
    attribution: Attribution,
    state: PolicyState,
    now: float,
    config: PolicyConfig,
    *,
    partial: bool = False,
    live_pids: frozenset[int] = frozenset(),
) -> Outcome:
    decisions: list[Report | Kill] = []
    over_since: dict[tuple[str, str], float] = {}
    needing: dict[tuple[str, str], float] = {}
    over_mib: dict[tuple[str, str], int] = {}
    reclaim_reported: set[tuple[str, str]] = set()
    pending = {
        gpu: (pid, at)
        for gpu, (pid, at) in state.pending_kill.items()
        if pid in live_pids and now - at < config.release_timeout_s
    }
    last_used = {k: u.used_mib for k, u in attribution.usage.items()}
    last_pids = {k: frozenset(p.pid for p in u.processes) for k, u in attribution.usage.items()}
    enforce = config.policy == "enforce"

    for binding in sorted(bindings, key=lambda b: b.gpu_uuid):
        gpu = binding.gpu_uuid
        killed_here = gpu in pending
        shares = {s.pod_uid: s for s in binding.shares}

        def usage_of(share: ShareSpec, gpu: str = gpu) -> PodUsage:
            return attribution.usage.get((share.pod_uid, gpu)) or PodUsage(share.pod_uid, gpu)

        # 1) over the limit
        for share in sorted(shares.values(), key=lambda s: s.pod_key):
            key = (share.pod_uid, gpu)
            usage = usage_of(share)
            over = usage.used_mib - share.mem_limit_mib
            over_mib[key] = max(0, over)
            if over <= _allowance(config, usage) or config.policy == "off":
                continue
            since = state.over_since.get(key, now)
            over_since[key] = since
            if key not in state.over_since:
                decisions.append(
                    Report(
                        share.pod_key,
                        gpu,
                        "GPUMemoryOverShare",
                        f"uses {usage.used_mib} MiB of GPU {gpu}, above its share of {share.mem_limit_mib} MiB "
                        f"(request {share.mem_request_mib} MiB); policy {config.policy}",
                    )
                )
            if not enforce or partial or usage.unknown or killed_here or now - since < config.grace_s:
                continue
            victim = _largest(usage)
            if victim is None:
                continue
            decisions.append(
                Kill(
                    victim.pid,
                    victim.start_ticks,
                    share.pod_key,
                    gpu,
                    "GPUMemoryLimitExceeded",
                    f"killed process {victim.pid} using {victim.used_mib} MiB on GPU {gpu}: pod uses "
                    f"{usage.used_mib} MiB, above its limit of {share.mem_limit_mib} MiB for {now - since:.0f}s",
                )
            )
            pending[gpu] = (victim.pid, now)
            killed_here = True

        # 2) reclaim borrowed memory for an owner that needs it back
        if not config.dynamic_fractions or config.policy == "off":
            continue
        used_total = sum(usage_of(s).used_mib for s in shares.values()) + attribution.foreign_mib.get(gpu, 0)
        free = binding.capacity_mib - used_total
        needers = []
        for share in shares.values():
            key = (share.pod_uid, gpu)
            usage = usage_of(share)
            if usage.used_mib >= share.mem_request_mib:
                continue
            # growth is only judged against a previous sample: a restarted agent does not kill on its first tick
            growing = key in state.last_pids and (
                usage.used_mib > state.last_used.get(key, usage.used_mib)
                or bool(last_pids[key] - state.last_pids[key])
            )
            since = state.needing_since.get(key)
            if growing:
                since = since if since is not None else now
            if since is not None and now - since < config.reclaim_window_s:
                needers.append(share)
                needing[key] = since
        deficit = sum(s.mem_request_mib - usage_of(s).used_mib for s in needers) + config.headroom_mib - free
        if not needers or deficit <= 0:
            for share in needers:
                needing.pop((share.pod_uid, gpu), None)
            continue
        borrowers = [
            s
            for s in shares.values()
            if usage_of(s).used_mib > s.mem_request_mib + _allowance(config, usage_of(s)) and s not in needers
        ]
        borrowers.sort(
            key=lambda s: (s.priority, -(usage_of(s).used_mib - s.mem_request_mib), _desc(s.created), s.pod_key)
        )
        owner = min(needers, key=lambda s: s.pod_key)
        for share in borrowers:
            usage = usage_of(share)
            borrowed = usage.used_mib - share.mem_request_mib
            victim = _covering(usage, deficit)
            if victim is None:
                continue
            message = (
                f"GPU memory reclaimed for {owner.pod_key}: killed process {victim.pid} ({victim.used_mib} MiB) "
                f"on GPU {gpu}; this pod borrowed {borrowed} MiB above its request of {share.mem_request_mib} MiB"
            )
            if not enforce:
                key = (share.pod_uid, gpu)
                reclaim_reported.add(key)
                if key not in state.reclaim_reported:
                    decisions.append(Report(share.pod_key, gpu, "GPUMemoryReclaimed", "(report only) " + message))
                break
            if partial or usage.unknown or killed_here:
                break
            decisions.append(Kill(victim.pid, victim.start_ticks, share.pod_key, gpu, "GPUMemoryReclaimed", message))
            pending[gpu] = (victim.pid, now)
            killed_here = True
            break

    next_state = PolicyState(
        over_since=over_since,
        last_used=last_used,
        last_pids=last_pids,
        needing_since=needing,
        pending_kill=pending,
        reclaim_reported=frozenset(reclaim_reported),
    )
    return Outcome(decisions=tuple(decisions), state=next_state, over_share_mib=over_mib)


def _desc(text: str) -> tuple[int, ...]:
    """Sort key that orders strings descending (newest creation timestamp first)."""
    return tuple(-ord(c) for c in text)

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
    """Each shared GPU in turn: first its pods over their limit (`_Tick.over_limit`), then memory borrowed from
    an owner that needs it back (`_Tick.reclaim`); at most one kill per GPU until the killed process is gone."""
    pending = {
        gpu: (pid, at)
        for gpu, (pid, at) in state.pending_kill.items()
        if pid in live_pids and now - at < config.release_timeout_s
    }
    tick = _Tick(attribution, state, now, config, partial, pending,
                 last_pids={k: frozenset(p.pid for p in u.processes) for k, u in attribution.usage.items()})
    for binding in sorted(bindings, key=lambda b: b.gpu_uuid):
        shares = {s.pod_uid: s for s in binding.shares}
        tick.over_limit(binding.gpu_uuid, shares)
        if config.dynamic_fractions and config.policy != "off":
            tick.reclaim(binding, shares)
    next_state = PolicyState(
        over_since=tick.over_since,
        last_used={k: u.used_mib for k, u in attribution.usage.items()},
        last_pids=tick.last_pids,
        needing_since=tick.needing,
        pending_kill=pending,
        reclaim_reported=frozenset(tick.reclaim_reported),
    )
    return Outcome(decisions=tuple(tick.decisions), state=next_state, over_share_mib=tick.over_mib)


@dataclass
class _Tick:
    """One evaluation: its inputs, and what the two rules decide and remember for the next one."""

    attribution: Attribution
    state: PolicyState
    now: float
    config: PolicyConfig
    partial: bool
    pending: dict[str, tuple[int, float]]  # gpu → (pid, at) of a kill whose memory is not released yet
    last_pids: dict[tuple[str, str], frozenset[int]]
    decisions: list[Report | Kill] = field(default_factory=list)
    over_since: dict[tuple[str, str], float] = field(default_factory=dict)
    needing: dict[tuple[str, str], float] = field(default_factory=dict)
    over_mib: dict[tuple[str, str], int] = field(default_factory=dict)
    reclaim_reported: set[tuple[str, str]] = field(default_factory=set)

    @property
    def enforce(self) -> bool:
        return self.config.policy == "enforce"

    def usage_of(self, share: ShareSpec, gpu: str) -> PodUsage:
        return self.attribution.usage.get((share.pod_uid, gpu)) or PodUsage(share.pod_uid, gpu)

    def kill(self, gpu: str, victim: ProcUsage, share: ShareSpec, reason: str, message: str) -> None:
        self.decisions.append(Kill(victim.pid, victim.start_ticks, share.pod_key, gpu, reason, message))
        self.pending[gpu] = (victim.pid, self.now)

    def over_limit(self, gpu: str, shares: dict[str, ShareSpec]) -> None:
        """A pod above its limit (plus the context allowance) is reported once, and under `enforce` its largest
        process is killed once it has been over for the grace period."""
        config, now = self.config, self.now
        for share in sorted(shares.values(), key=lambda s: s.pod_key):
            key = (share.pod_uid, gpu)
            usage = self.usage_of(share, gpu)
            over = usage.used_mib - share.mem_limit_mib
            self.over_mib[key] = max(0, over)
            if over <= _allowance(config, usage) or config.policy == "off":
                continue
            since = self.state.over_since.get(key, now)
            self.over_since[key] = since
            if key not in self.state.over_since:
                self.decisions.append(
                    Report(
                        share.pod_key,
                        gpu,
                        "GPUMemoryOverShare",
                        f"uses {usage.used_mib} MiB of GPU {gpu}, above its share of {share.mem_limit_mib} MiB "
                        f"(request {share.mem_request_mib} MiB); policy {config.policy}",
                    )
                )
            if (not self.enforce or self.partial or usage.unknown or gpu in self.pending
                    or now - since < config.grace_s):
                continue
            victim = _largest(usage)
            if victim is None:
                continue
            self.kill(gpu, victim, share, "GPUMemoryLimitExceeded",
                      f"killed process {victim.pid} using {victim.used_mib} MiB on GPU {gpu}: pod uses "
                      f"{usage.used_mib} MiB, above its limit of {share.mem_limit_mib} MiB for {now - since:.0f}s")

    def _needers(self, gpu: str, shares: dict[str, ShareSpec]) -> list[ShareSpec]:
        """Pods below their request that grew within the reclaim window (they need their memory back)."""
        config, now, state = self.config, self.now, self.state
        needers = []
        for share in shares.values():
            key = (share.pod_uid, gpu)
            usage = self.usage_of(share, gpu)
            if usage.used_mib >= share.mem_request_mib:
                continue
            # growth is only judged against a previous sample: a restarted agent does not kill on its first tick
            growing = key in state.last_pids and (
                usage.used_mib > state.last_used.get(key, usage.used_mib)
                or bool(self.last_pids[key] - state.last_pids[key])
            )
            since = state.needing_since.get(key)
            if growing:
                since = since if since is not None else now
            if since is not None and now - since < config.reclaim_window_s:
                needers.append(share)
                self.needing[key] = since
        return needers

    def reclaim(self, binding: GpuBinding, shares: dict[str, ShareSpec]) -> None:
        """Memory borrowed above a request goes back to an owner that needs it: one process of the first
        borrower (lowest priority, most borrowed, newest) is killed (`enforce`) or reported (`report`)."""
        gpu, config = binding.gpu_uuid, self.config
        used_total = sum(self.usage_of(s, gpu).used_mib for s in shares.values())
        free = binding.capacity_mib - used_total - self.attribution.foreign_mib.get(gpu, 0)
        needers = self._needers(gpu, shares)
        deficit = sum(s.mem_request_mib - self.usage_of(s, gpu).used_mib for s in needers) + config.headroom_mib - free
        if not needers or deficit <= 0:
            for share in needers:
                self.needing.pop((share.pod_uid, gpu), None)
            return
        borrowers = [
            s
            for s in shares.values()
            if self.usage_of(s, gpu).used_mib > s.mem_request_mib + _allowance(config, self.usage_of(s, gpu))
            and s not in needers
        ]
        borrowers.sort(key=lambda s: (s.priority, -(self.usage_of(s, gpu).used_mib - s.mem_request_mib),
                                      _desc(s.created), s.pod_key))
        owner = min(needers, key=lambda s: s.pod_key)
        for share in borrowers:
            usage = self.usage_of(share, gpu)
            victim = _covering(usage, deficit)
            if victim is None:
                continue
            message = (
                f"GPU memory reclaimed for {owner.pod_key}: killed process {victim.pid} ({victim.used_mib} MiB) "
                f"on GPU {gpu}; this pod borrowed {usage.used_mib - share.mem_request_mib} MiB above its request "
                f"of {share.mem_request_mib} MiB"
            )
            if not self.enforce:
                key = (share.pod_uid, gpu)
                self.reclaim_reported.add(key)
                if key not in self.state.reclaim_reported:
                    self.decisions.append(Report(share.pod_key, gpu, "GPUMemoryReclaimed", "(report only) " + message))
            elif not (self.partial or usage.unknown or gpu in self.pending):
                self.kill(gpu, victim, share, "GPUMemoryReclaimed", message)
            return


def _desc(text: str) -> tuple[int, ...]:
    """Sort key that orders strings descending (newest creation timestamp first)."""
    return tuple(-ord(c) for c in text)

"""One node's tick: cluster view + GPU sample in, actions out (no I/O, no clock: `now` is passed in).

`NodeAgent.tick` keeps only the state the policies need between ticks (memory policy state, which
one-shot events were already emitted, configmaps already written). Everything else is rebuilt from
the cluster each tick, so a restarted agent converges to the same actions: existing annotations are
the truth for device assignment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from services.nodeagent.binding import (
    FAKE_DEVICES_ANNOTATION,
    RESERVE_ANNOTATION,
    Attribution,
    Claim,
    GpuBinding,
    assign_devices,
    attribute,
    split_devices,
)
from services.nodeagent.inventory import Gpu, InventorySample
from services.nodeagent.memory_policy import Kill, Outcome, PolicyConfig, PolicyState, Report, evaluate
from services.nodeagent.mig import capacity_mib, mig_refusal, node_is_mig, swap_enabled, swap_refusal
from services.nodeagent.procmap import ContainerRef
from services.nodeagent.shares import (
    SHARED_CONFIGMAP,
    SWAP_REQUEST,
    ShareError,
    ShareSpec,
    gpu_groups,
    is_fractional,
    parse_share,
)
from services.nodeagent.sharing_modes import mode_policy, mps_values, writes_mps_configmaps
from services.nodeagent.telemetry import GpuStat, MigStat, PodGpuStat
from services.nodeagent.timeslice import compute_plan, mps_env
from services.nodeagent.translate import NodeView, PodView
from shoal.core.kai_labels import GPU_GROUP_LABEL
from shoal.core.model import DEFAULT_RESERVATION_NAMESPACE
from shoal.core.sharing_mode import NON_MEMORY_ENFORCED

MPS_NODE_LABEL = "nvidia.com/gpu.sharing-strategy"


@dataclass(frozen=True)
class AgentConfig:
    reservation_namespace: str = DEFAULT_RESERVATION_NAMESPACE
    may_choose_devices: bool = False  # fake backend: no device plugin, the agent assigns devices
    annotate_devices: bool = True  # fake backend without an on-disk device record: whole-GPU pods get the annotation
    time_slicing: str = "none"  # none | strict | fair
    mps: bool = False
    swap_reserved_mib: int = 2048


@dataclass(frozen=True)
class Annotate:
    namespace: str
    name: str
    key: str
    value: str


@dataclass(frozen=True)
class PodEvent:
    namespace: str
    name: str
    uid: str
    reason: str
    message: str
    type: str = "Warning"


@dataclass(frozen=True)
class WriteConfigMap:
    namespace: str
    name: str
    data: dict[str, str]
    owner_pod: str  # pod name, for an ownerReference when the map has to be created
    owner_uid: str


@dataclass
class TickResult:
    annotate: list[Annotate] = field(default_factory=list)
    events: list[PodEvent] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    configmaps: list[WriteConfigMap] = field(default_factory=list)
    gpus: tuple[GpuStat, ...] = ()
    pods: tuple[PodGpuStat, ...] = ()
    notes: list[str] = field(default_factory=list)  # node-level conditions, for the log
    pod_gpus: dict[str, tuple[str, ...]] = field(default_factory=dict)  # pod uid → GPUs it uses (shared or whole)
    recorded: dict[str, tuple[str, ...]] = field(default_factory=dict)  # fake mode: whole-GPU pod uid → GPUs given now


def is_reservation(pod: PodView, namespace: str) -> bool:
    return pod.namespace == namespace and GPU_GROUP_LABEL in pod.labels


class NodeAgent:
    """The node agent's decisions for one node."""

    def __init__(self, node_name: str, config: AgentConfig) -> None:
        self.node_name = node_name
        self.config = config
        self.state = PolicyState()
        self.emitted: set[tuple[str, str]] = set()  # (pod uid, event key) of one-shot events
        self.written: dict[tuple[str, str], dict[str, str]] = {}
        self.plan_no = 0

    def _once(self, result: TickResult, pod: PodView, reason: str, message: str, detail: str = "") -> None:
        key = (pod.uid, reason + detail)
        if key not in self.emitted:
            self.emitted.add(key)
            result.events.append(PodEvent(pod.namespace, pod.name, pod.uid, reason, message))

    def _assign(self, gpus: tuple[Gpu, ...], pods: list[PodView], observed: Mapping[str, tuple[str, ...]],
                recorded: Mapping[str, tuple[str, ...]], result: TickResult) -> dict[str, tuple[str, ...]]:
        ns = self.config.reservation_namespace
        claims: list[Claim] = []
        whole: set[str] = set()
        for pod in pods:
            if not pod.active:
                continue
            if is_reservation(pod, ns):
                existing = split_devices(pod.annotations.get(RESERVE_ANNOTATION, ""))
                claims.append(Claim(pod.key, pod.created, 1, existing, observed.get(pod.key, ())))
            elif pod.whole_gpus > 0:
                whole.add(pod.key)
                existing = split_devices(pod.annotations.get(FAKE_DEVICES_ANNOTATION, "")) or recorded.get(pod.uid, ())
                claims.append(Claim(pod.key, pod.created, pod.whole_gpus, existing, observed.get(pod.key, ())))
        got = assign_devices([g.uuid for g in gpus], claims, may_choose=self.config.may_choose_devices)
        by_key = {p.key: p for p in pods}
        for key, devices in sorted(got.new.items()):
            pod = by_key[key]
            if key in whole:
                if not self.config.may_choose_devices:
                    continue  # real mode: the device plugin's env is the record; nothing to write
                result.recorded[pod.uid] = devices  # the fake device plugin's allocation (`device_record`)
                if self.config.annotate_devices:
                    result.annotate.append(Annotate(pod.namespace, pod.name, FAKE_DEVICES_ANNOTATION,
                                                    ",".join(devices)))
            else:
                result.annotate.append(Annotate(pod.namespace, pod.name, RESERVE_ANNOTATION, devices[0]))
        for conflict in got.conflicts:
            pod = by_key[conflict.pod_key]
            where = f"already held by {conflict.holder}" if conflict.holder else f"not on node {self.node_name}"
            self._once(result, pod, "GPUAssignmentConflict",
                       f"GPU {conflict.gpu_uuid} claimed by this pod is {where}", conflict.gpu_uuid)
        return got.devices

    def tick(
        self,
        node: NodeView,
        pods: Iterable[PodView],
        sample: InventorySample,
        now: float,
        *,
        policy: PolicyConfig,
        sharing_mode: str = NON_MEMORY_ENFORCED,
        refs: Mapping[int, ContainerRef] | None = None,
        observed: Mapping[str, tuple[str, ...]] | None = None,
        recorded: Mapping[str, tuple[str, ...]] | None = None,
    ) -> TickResult:
        """One tick of the node: devices assigned (`_assign`), the shared GPUs' shares (`_shares`), the memory
        policy (`_police`), time-slicing compute shares, MPS ConfigMaps, and the telemetry of GPUs and pods."""
        result = TickResult()
        policy = mode_policy(policy, sharing_mode)
        pods = sorted((p for p in pods if p.node_name == node.name), key=lambda p: p.key)
        gpus = tuple(sorted(sample.gpus, key=lambda g: g.index))
        devices = self._assign(gpus, pods, observed or {}, recorded or {}, result)
        holder = {gpu: key for key, held in devices.items() for gpu in held}
        group_gpu: dict[str, str] = {}
        for pod in pods:
            if is_reservation(pod, self.config.reservation_namespace) and devices.get(pod.key):
                group_gpu[pod.labels[GPU_GROUP_LABEL]] = devices[pod.key][0]

        mig = node_is_mig(gpus, node.labels, node.allocatable)
        swap = swap_enabled(node.labels)
        mode = self.config.time_slicing
        if swap and mode in ("strict", "fair"):
            result.notes.append(f"time-slicing {mode} is not available on swap-enabled node {node.name}")
            mode = "none"
        capacity = {g.uuid: capacity_mib(g, node.labels, self.config.swap_reserved_mib) for g in gpus}

        bindings, share_pods = self._shares(node, pods, group_gpu, capacity, mig, mode, result)
        by_key = {p.key: p for p in pods}
        for key, held in devices.items():
            if by_key[key].namespace != self.config.reservation_namespace:
                result.pod_gpus[by_key[key].uid] = held
        for binding in bindings:
            for spec in binding.shares:
                result.pod_gpus[spec.pod_uid] = result.pod_gpus.get(spec.pod_uid, ()) + (binding.gpu_uuid,)
        attribution, outcome = self._police(bindings, share_pods, sample, refs, now, policy, result)
        compute = self._compute_shares(bindings, attribution, mode)
        if (self.config.mps or node.labels.get(MPS_NODE_LABEL) == "mps") and writes_mps_configmaps(sharing_mode):
            self._mps_configmaps(bindings, share_pods, mode, result)
        result.gpus = tuple(_gpu_stat(g, capacity[g.uuid], holder.get(g.uuid, "")) for g in gpus)
        result.pods = _pod_stats(bindings, attribution, share_pods, compute, outcome.over_share_mib)
        live = {p.uid for p in pods if p.active}
        self.emitted = {e for e in self.emitted if e[0] in live}
        return result

    def _shares(self, node: NodeView, pods: list[PodView], group_gpu: Mapping[str, str], capacity: Mapping[str, int],
                mig: bool, mode: str, result: TickResult) -> tuple[list[GpuBinding], dict[str, PodView]]:
        """The shared GPUs' bindings (each fractional pod's share of the GPU its reservation holds) and the
        fractional pods by uid; refusals (MIG, swap, an invalid share) become one-shot events."""
        shares: dict[str, list[ShareSpec]] = {}
        share_pods: dict[str, PodView] = {}
        for pod in pods:
            if not pod.active or not is_fractional(pod) or is_reservation(pod, self.config.reservation_namespace):
                continue
            if mig:
                refusal = mig_refusal(pod.key, node.name)
                self._once(result, pod, refusal.reason, refusal.message)
                continue
            if pod.annotations.get(SWAP_REQUEST, "").lower() in ("true", "1", "yes"):
                refusal = swap_refusal(pod.key)
                self._once(result, pod, refusal.reason, refusal.message)
            for group in gpu_groups(pod):
                gpu_uuid = group_gpu.get(group)
                if gpu_uuid is None or gpu_uuid not in capacity:
                    continue  # reservation not (yet) assigned: nothing to police
                spec = parse_share(pod, capacity[gpu_uuid], mode)
                if isinstance(spec, ShareError):
                    self._once(result, pod, "InvalidGPUShare", spec.message)
                    break
                shares.setdefault(gpu_uuid, []).append(spec)
                share_pods[pod.uid] = pod
        return [GpuBinding(u, capacity[u], tuple(s)) for u, s in sorted(shares.items())], share_pods

    def _police(self, bindings: list[GpuBinding], share_pods: Mapping[str, PodView], sample: InventorySample,
                refs: Mapping[int, ContainerRef] | None, now: float, policy: PolicyConfig,
                result: TickResult) -> tuple[Attribution, Outcome]:
        """Processes attributed to the shares, the memory policy evaluated: kills and report events."""
        all_refs = dict(refs or {})
        for proc in sample.processes:
            if proc.pod_uid:
                all_refs[proc.pid] = ContainerRef(proc.pod_uid, proc.container_id)
        attribution = attribute(sample.processes, all_refs, bindings)
        outcome = evaluate(
            bindings, attribution, self.state, now, policy,
            partial=sample.partial, live_pids=frozenset(p.pid for p in sample.processes),
        )
        self.state = outcome.state
        for decision in outcome.decisions:
            pod = next(p for p in share_pods.values() if p.key == decision.pod_key)
            if isinstance(decision, Kill):
                result.kills.append(decision)
            elif isinstance(decision, Report):
                result.events.append(PodEvent(pod.namespace, pod.name, pod.uid, decision.reason, decision.message))
        return attribution, outcome

    def _compute_shares(self, bindings: list[GpuBinding], attribution: Attribution,
                        mode: str) -> dict[tuple[str, str], Fraction]:
        """Time-slicing (strict/fair): each share's part of its GPU's compute, by (pod uid, GPU)."""
        compute: dict[tuple[str, str], Fraction] = {}
        if mode not in ("strict", "fair"):
            return compute
        for binding in bindings:
            active = frozenset(
                s.pod_key for s in binding.shares
                if attribution.usage[(s.pod_uid, binding.gpu_uuid)].processes
            )
            plan = compute_plan(binding.shares, mode, active=active, plan_no=self.plan_no)
            for s in binding.shares:
                compute[(s.pod_uid, binding.gpu_uuid)] = plan.share(s.pod_key)
        self.plan_no += 1
        return compute

    def _mps_configmaps(self, bindings: list[GpuBinding], share_pods: Mapping[str, PodView], mode: str,
                        result: TickResult) -> None:
        """MPS client limits into the pod's `<runai/shared-gpu-configmap>-<idx>-evar` map (read via envFrom)."""
        seen: set[str] = set()
        for binding in bindings:
            for s in binding.shares:
                pod = share_pods[s.pod_uid]
                prefix = pod.annotations.get(SHARED_CONFIGMAP)
                if not prefix or pod.uid in seen:
                    continue  # multi-device pods: the first GPU's values (limits are per device and equal)
                seen.add(pod.uid)
                name = f"{prefix}-{pod.fraction_container}-evar"
                data = mps_values(mps_env(s, mode), s.compute_mode)
                if self.written.get((pod.namespace, name)) != data:
                    result.configmaps.append(WriteConfigMap(pod.namespace, name, data, pod.name, pod.uid))

    def timeless(self, before: PolicyState, plan_no: int) -> bool:
        """The last tick left the policy state as `before` was, with no clock reading in it (no share over its
        limit, none waiting for memory back, no kill pending) and turned no time-slicing plan: ticking the
        same inputs again gives the same outcome whatever `now` is."""
        s = self.state
        return self.plan_no == plan_no and s == before and not (s.over_since or s.needing_since or s.pending_kill)

    def configmap_written(self, action: WriteConfigMap) -> None:
        self.written[(action.namespace, action.name)] = action.data


def _gpu_stat(g: Gpu, capacity: int, holder: str) -> GpuStat:
    return GpuStat(
        uuid=g.uuid, index=g.index, name=g.name, memory_total_mib=g.memory_total_mib,
        memory_used_mib=g.memory_used_mib, capacity_mib=capacity,
        utilization_percent=g.utilization_percent, mig_enabled=g.mig_enabled,
        mig_instances=tuple(
            MigStat(uuid=m.uuid, gpu_instance_id=m.gpu_instance_id, compute_instance_id=m.compute_instance_id,
                    memory_total_mib=m.memory_total_mib, memory_used_mib=m.memory_used_mib)
            for m in g.mig_instances
        ),
        holder=holder,
    )


def _pod_stats(bindings: list[GpuBinding], attribution: Attribution, share_pods: Mapping[str, PodView],
               compute: Mapping[tuple[str, str], Fraction],
               over_share_mib: Mapping[tuple[str, str], int]) -> tuple[PodGpuStat, ...]:
    stats = []
    for binding in bindings:
        for s in binding.shares:
            key = (s.pod_uid, binding.gpu_uuid)
            usage = attribution.usage[key]
            pod = share_pods[s.pod_uid]
            share_of = compute.get(key)
            stats.append(PodGpuStat(
                namespace=pod.namespace, pod=pod.name, pod_uid=pod.uid, gpu_uuid=binding.gpu_uuid,
                memory_used_mib=usage.used_mib, memory_request_mib=s.mem_request_mib,
                memory_limit_mib=s.mem_limit_mib, fraction=float(s.fraction) if s.fraction is not None else None,
                over_share_mib=over_share_mib.get(key, 0),
                utilization_percent=min(100, usage.sm_util_percent),
                compute_share=float(share_of) if share_of is not None else None,
            ))
    return tuple(sorted(stats, key=lambda p: (p.gpu_uuid, p.namespace, p.pod)))

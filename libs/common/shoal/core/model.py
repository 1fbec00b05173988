"""Immutable snapshot types: the one input of the scheduling core.

Everything is plain data in integer units (millicores, bytes, MiB, milli-GPU, whole GPU devices);
`now` and `revision` are data too. Build a snapshot with `make_snapshot(...)`, which sorts every
collection by id so the same cluster always gives the same snapshot, whatever the input order.

Schema evolution: fields are only ever added, with defaults; nothing is renamed. Fields equal to their
default are left out of encoded values (typed snapshots in Redis are half the size).
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter

import msgspec

# ---- well-known keys and values -------------------------------------------------------------------
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
LABEL_TASK_PRIORITY = "kai.scheduler/task-priority"
LABEL_KUBEFLOW_ROLE = "training.kubeflow.org/job-role"
LABEL_RAY_NODE_TYPE = "ray.io/node-type"
LABEL_BACKGROUND = "kai.scheduler/background"  # "true": planned as if absent, evicted when its room is taken
ANNOTATION_LAST_START = "kai.scheduler/last-start-timestamp"
ANNOTATION_BIND_FAILURES = "shoal.io/bind-failures"
ANNOTATION_LAST_BIND_FAILURE = "shoal.io/last-bind-failure"
ANNOTATION_LAST_BIND_ERROR = "shoal.io/last-bind-error"
ANNOTATION_STALE = "kai.scheduler/stale-podgroup-timestamp"
ANNOTATION_LAST_EVICTION = "kai.scheduler/last-eviction-timestamp"
DEFAULT_RESERVATION_NAMESPACE = "kai-resource-reservation"

PHASE_PENDING = "Pending"
PHASE_RUNNING = "Running"
PHASE_SUCCEEDED = "Succeeded"
PHASE_FAILED = "Failed"

UNLIMITED = -1
DEFAULT_PRIORITY = 50
DEFAULT_QUEUE_PRIORITY = 100
NON_PREEMPTIBLE_PRIORITY = 100
PREEMPTIBLE = "preemptible"
NON_PREEMPTIBLE = "non-preemptible"
SEMI_PREEMPTIBLE = "semi-preemptible"  # the gang's minimum is non-preemptible, the pods above it are not

ALL_ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")


class Taint(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


class Toleration(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    key: str = ""  # empty key + operator Exists tolerates everything
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty matches every effect


class NodeSelectorRequirement(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()


class NodeSelectorTerm(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """All requirements of one term must hold (AND); a pod's terms are ORed."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()


class Node(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    pool: str = ""
    labels: dict[str, str] = {}
    taints: tuple[Taint, ...] = ()
    cpu_milli: int = 0  # allocatable
    memory_bytes: int = 0
    pods: int = 110
    gpus: int = 0  # whole devices
    gpu_memory_mib: int | None = None  # from label nvidia.com/gpu.memory; None when missing
    ready: bool = True
    unschedulable: bool = False  # cordoned
    mig_enabled: bool = False


class FractionRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A shared-GPU request: exactly one of portion_milli / gpu_memory_mib is set."""

    portion_milli: int | None = None  # gpu-fraction "0.5" -> 500 (0 < p < 1000)
    gpu_memory_mib: int | None = None  # gpu-memory, or nvidia.com/container.<c>.gpu-memory.request
    num_devices: int = 1
    gpu_memory_limit_mib: int | None = None  # nvidia.com/container.<c>.gpu-memory.limit (dynamic fraction)


class Pod(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    uid: str
    namespace: str
    name: str
    pod_group: str = ""  # PodGroup name in the same namespace ("" = none)
    subgroup: str | None = None  # kai.scheduler/subgroup-name
    cpu_milli: int = 0
    memory_bytes: int = 0
    gpus: int = 0  # whole nvidia.com/gpu devices
    fraction: FractionRequest | None = None
    fraction_error: str | None = None  # invalid gpu-fraction/gpu-memory annotation, as text
    node_selector: dict[str, str] = {}
    affinity_terms: tuple[NodeSelectorTerm, ...] = ()  # required node affinity, ORed
    tolerations: tuple[Toleration, ...] = ()
    phase: str = PHASE_PENDING
    node_name: str | None = None  # set = bound / binding / running there
    nominated_node: str | None = None  # pipelined onto this node by an earlier cycle
    gpu_groups: tuple[str, ...] = ()  # runai-gpu-group label(s) of a fractional pod
    created: str | int = 0  # sortable (RFC3339 string or epoch)
    task_priority: int | None = None  # kai.scheduler/task-priority
    labels: dict[str, str] = {}
    deleting: bool = False  # deletionTimestamp set: its resources are releasing
    gated: bool = False  # has scheduling gates
    gates: tuple[str, ...] = ()  # their names (e.g. grove.io/podgang-pending-creation)
    managed: bool = True  # scheduled by Shoal (pods of other schedulers only count as used)
    owner_kind: str | None = None
    owner_name: str | None = None
    eviction_blocked: bool = False  # a PodDisruptionBudget allows no disruption now (SPEC §2.2)
    compute_mode: str | None = None  # nvidia.com/container.<c>.gpu-compute.mode; None = time-slicing
    background: bool = False  # label kai.scheduler/background=true (KAI v0.18 background pods)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class SubGroup(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    parent: str | None = None  # None = child of the PodGroup's root
    min_member: int | None = None  # leaves
    min_subgroup: int | None = None  # mid-level; None = all children
    topology: str | None = None
    required_level: str | None = None
    preferred_level: str | None = None


class PodGroup(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    namespace: str
    name: str
    uid: str = ""
    queue: str = ""
    min_member: int = 1
    min_subgroup: int | None = None  # root level; None with subgroups = all children
    subgroups: tuple[SubGroup, ...] = ()
    priority_class_name: str = ""
    priority: int | None = None  # resolved value; None = resolve from priority classes
    preemptibility: str = ""  # "preemptible" | "non-preemptible" | "semi-preemptible" | "" (from priority)
    created: str | int = 0
    node_pool: str = ""
    topology: str | None = None
    required_level: str | None = None
    preferred_level: str | None = None
    last_start_timestamp: str | None = None
    stale_timestamp: str | None = None
    last_eviction_timestamp: str | None = None
    preemption_delay_s: int | None = None
    staleness_grace_s: int | None = None
    mark_unschedulable: bool = True
    scheduling_backoff: int = -1
    condition_reason: str | None = None  # current schedulingConditions[0].reasons[0] (for clearing)
    annotations: dict[str, str] = {}
    bind_failures: int = 0  # shoal.io/bind-failures: failed bind rounds since the job last bound (bindbackoff.py)
    last_bind_failure: str | None = None  # shoal.io/last-bind-failure (RFC3339)
    last_bind_error: str = ""  # shoal.io/last-bind-error
    core_pods: tuple[str, ...] = ()  # status.schedulingState.corePods as last published (semi-preemptible)
    # made here by the podgrouper's rules for pods whose PodGroup is not in the cluster (yet): the scheduler
    # writes nothing onto it (the podgrouper creates it, a bare pod's after the bind with its start stamp)
    generated: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def semi_preemptible(self) -> bool:
        return self.preemptibility == SEMI_PREEMPTIBLE


class QueueResource(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Units: gpu in milli-GPU, cpu in millicores, memory in bytes. -1 = unlimited.

    `limit=None` means the limit was omitted: Shoal reads it as limit = quota (SPEC §2.1).
    """

    quota: int = 0
    limit: int | None = None
    weight: float = 1.0

    @property
    def effective_limit(self) -> int:
        return self.quota if self.limit is None else self.limit


class Queue(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    parent: str | None = None
    display_name: str = ""
    priority: int = DEFAULT_QUEUE_PRIORITY
    created: str | int = 0
    gpu: QueueResource = QueueResource(quota=UNLIMITED, limit=UNLIMITED)
    cpu: QueueResource = QueueResource(quota=UNLIMITED, limit=UNLIMITED)
    memory: QueueResource = QueueResource(quota=UNLIMITED, limit=UNLIMITED)
    preempt_min_runtime_s: int | None = None
    reclaim_min_runtime_s: int | None = None

    @property
    def label(self) -> str:
        return self.display_name or self.name


class PriorityClass(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    value: int
    global_default: bool = False


class QueueUsage(msgspec.Struct, frozen=True, kw_only=True):
    """Normalised historical usage in [0, 1] per resource (time-based fair share)."""

    queue: str
    gpu: float = 0.0
    cpu: float = 0.0
    memory: float = 0.0


class ShardConfig(msgspec.Struct, frozen=True, kw_only=True):
    name: str = "default"
    gpu_placement: str = "binpack"  # binpack | spread
    cpu_placement: str = "binpack"
    actions: tuple[str, ...] = ALL_ACTIONS
    reservation_namespace: str = DEFAULT_RESERVATION_NAMESPACE
    k_value: float = 1.0
    usage: tuple[QueueUsage, ...] = ()
    preempt_min_runtime_s: int = 0
    reclaim_min_runtime_s: int = 0
    reclaim_resolve_method: str = "lca"
    default_staleness_grace_s: int = 60
    max_consolidation_preemptees: int = 16
    victim_budget: int = 10_000
    victim_budget_per_job: int = 1_000
    queue_depth_per_action: dict[str, int] = {}
    stuck_in_releasing_s: int = 120
    reclaimer_saturation_multiplier: float = 1.0  # KAI relcaimerSaturationMultiplier; < 1 reads as 1
    gpu_sharing_mode: str = "NonMemoryEnforced"  # KAI gpuSharingMode (shoal.core.sharing_mode.MODES)
    bind_backoff_initial_s: int = 5  # after a failed bind the job waits this long, doubling per failure
    bind_backoff_max_s: int = 300  # ... up to this


class Topology(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A Topology CR (kai.scheduler/v1alpha1): node-label levels, top to bottom (core II, topology.py)."""

    name: str
    levels: tuple[str, ...] = ()  # node label keys
    aliases: tuple[str, ...] = ()  # optional alias per level ("" when none)


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    nodes: tuple[Node, ...] = ()
    pods: tuple[Pod, ...] = ()
    pod_groups: tuple[PodGroup, ...] = ()
    queues: tuple[Queue, ...] = ()
    priority_classes: tuple[PriorityClass, ...] = ()
    config: ShardConfig = ShardConfig()
    now: str | int = 0  # RFC3339 string or epoch seconds
    revision: int = 0
    topologies: tuple[Topology, ...] = ()


def make_snapshot(
    *,
    nodes=(),
    pods=(),
    pod_groups=(),
    queues=(),
    priority_classes=(),
    config: ShardConfig | None = None,
    now: str | int = 0,
    revision: int = 0,
    topologies=(),
    presorted: tuple[str, ...] = (),
) -> Snapshot:
    """Build a Snapshot with every collection sorted by its id (input order never matters). `presorted`
    names collections ("pods", "pod_groups") the caller passes already in that order (kept, not sorted)."""
    return Snapshot(
        nodes=tuple(sorted(nodes, key=_BY_NAME)),
        pods=tuple(pods) if "pods" in presorted else _sorted_by(pods, ("namespace", "name", "uid")),
        pod_groups=tuple(pod_groups) if "pod_groups" in presorted else _sorted_by(pod_groups, ("namespace", "name")),
        queues=tuple(sorted(queues, key=_BY_NAME)),
        priority_classes=tuple(sorted(priority_classes, key=_BY_NAME)),
        config=config if config is not None else ShardConfig(),
        now=now,
        revision=revision,
        topologies=tuple(sorted(topologies, key=_BY_NAME)),
    )


_BY_NAME = attrgetter("name")


def pod_order(pod: Pod) -> tuple[str, str, str]:
    """A pod's place in a Snapshot's sorted pods."""
    return pod.namespace, pod.name, pod.uid


def group_order(group: PodGroup) -> tuple[str, str]:
    """A PodGroup's place in a Snapshot's sorted pod groups."""
    return group.namespace, group.name


_NUL = "\0"


def _sorted_by(items: Iterable, fields: tuple[str, ...]) -> tuple:
    """`items` sorted by the tuple of `fields` (strings): 140k pods in ~0.1 s instead of ~0.3 s, because the
    key is one string, the fields joined by NUL, which orders exactly like the tuple when no field holds a
    NUL (Kubernetes names and uids never do; if one does, the tuple is the key)."""
    items = list(items)
    if any(_NUL in "".join(map(attrgetter(f), items)) for f in fields):
        return tuple(sorted(items, key=attrgetter(*fields)))
    return tuple(sorted(items, key=_JOINED[fields]))


_JOINED = {
    ("namespace", "name", "uid"): lambda p: f"{p.namespace}\0{p.name}\0{p.uid}",
    ("namespace", "name"): lambda g: f"{g.namespace}\0{g.name}",
}


def resolve_priority(group: PodGroup, classes: dict[str, PriorityClass], default: int | None = None) -> int:
    """§1.4: the class value, else the globalDefault class's value, else 50."""
    if group.priority is not None:
        return group.priority
    pc = classes.get(group.priority_class_name)
    if pc is not None:
        return pc.value
    if default is not None:
        return default
    return DEFAULT_PRIORITY


def global_default_priority(classes: dict[str, PriorityClass]) -> int | None:
    for pc in sorted(classes.values(), key=lambda c: c.name):
        if pc.global_default:
            return pc.value
    return None


def is_preemptible(group: PodGroup, priority: int) -> bool:
    """§4.8: spec.preemptibility wins, else priority < 100 (a semi-preemptible group can be preempted:
    its pods above the gang minimum)."""
    if group.preemptibility in (PREEMPTIBLE, SEMI_PREEMPTIBLE):
        return True
    if group.preemptibility == NON_PREEMPTIBLE:
        return False
    return priority < NON_PREEMPTIBLE_PRIORITY

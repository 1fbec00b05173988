"""The plan: the one output of a cycle — frozen, ordered operations plus per-queue figures.

Operation order: the placement decisions (Reserve, Bind, Pipeline, Evict) in decision order, then the
PodGroup status operations (Annotate, SetCondition, ClearCondition, PodGroupEvent) and pod events, sorted
by PodGroup / pod key. `plan_id` is a hash of the revision and the encoded operations, so the same
snapshot always yields the same id (binders and planners de-duplicate on it).
"""

from __future__ import annotations

import hashlib

import msgspec


class Op(msgspec.Struct, frozen=True, kw_only=True, tag_field="op"):
    pass


class Reserve(Op, tag="Reserve"):
    """Open a shared GPU group: the binder creates its reservation pod (one per group)."""

    node: str
    gpu_group: str
    gpu_index: int  # ordinal of the group among the node's shared GPUs when opened (informative)
    compute_mode: str | None = None  # the gpu-compute.mode of the pod that opens it (on the reservation pod)


class Bind(Op, tag="Bind"):
    pod: str  # ns/name
    pod_uid: str
    node: str
    gpu_groups: tuple[str, ...] = ()
    fraction: str | None = None  # receivedGPU.portion, "%.2f" ("0.50"); None for whole-GPU pods
    gpus: int = 0  # receivedGPU.count (whole GPUs, or devices for a fraction)
    received_resource_type: str = "Regular"  # Regular | Fraction
    pod_group: str = ""
    compute_mode: str | None = None  # a fraction's stated gpu-compute.mode (the reservation pod records it)
    gpu_memory_mib: int | None = None  # a fraction's GPU memory per device (HamiCore/NvFractions limits)
    gpu_memory_limit_mib: int | None = None  # its per-container limit, a dynamic fraction's


class Pipeline(Op, tag="Pipeline"):
    pod: str
    pod_uid: str
    node: str
    gpu_groups: tuple[str, ...] = ()
    pod_group: str = ""
    message: str = ""


class Evict(Op, tag="Evict"):
    pod: str
    pod_uid: str
    node: str
    action: str  # allocate | consolidation | reclaim | preempt | stalegangeviction | backgroundpods
    by: str  # ns/podgroup of the evictor
    message: str
    pod_group: str = ""


class QueueDetails(msgspec.Struct, frozen=True, kw_only=True):
    """details.queueDetails of a scheduling condition reason (vectors as (cpu_milli, memory_bytes, gpu_milli))."""

    name: str
    requested: tuple[int, int, int] = (0, 0, 0)
    deserved: tuple[int, int, int] = (0, 0, 0)
    allocated: tuple[int, int, int] = (0, 0, 0)
    allocated_non_preemptible: tuple[int, int, int] = (0, 0, 0)
    limit: tuple[int, int, int] = (0, 0, 0)
    pod_group_requested: tuple[int, int, int] = (0, 0, 0)
    pod_group_requested_non_preemptible: tuple[int, int, int] = (0, 0, 0)


class ConditionReason(msgspec.Struct, frozen=True, kw_only=True):
    reason: str
    message: str
    details: QueueDetails | None = None


class SetCondition(Op, tag="SetCondition"):
    """schedulingConditions[0] = UnschedulableOnNodePool / Unschedulable with this message and reasons."""

    pod_group: str
    reason: (
        str  # the first reason (OverLimit, NonPreemptibleOverQuota, QueueDoesNotExist, PodSchedulingErrors…)
    )
    message: str
    reasons: tuple[ConditionReason, ...] = ()
    node_pool: str = ""


class ClearCondition(Op, tag="ClearCondition"):
    pod_group: str


class PodGroupEvent(Op, tag="PodGroupEvent"):
    pod_group: str
    reason: str  # NotReady, …
    message: str
    type: str = "Normal"


class PodEvent(Op, tag="PodEvent"):
    pod: str
    reason: str  # Unschedulable, Scheduled, Pipelined
    message: str
    type: str = "Warning"
    pod_group: str = ""


class SetCorePods(Op, tag="SetCorePods"):
    """status.schedulingState.corePods of a semi-preemptible PodGroup: its protected pods, by name."""

    pod_group: str
    pods: tuple[str, ...] = ()


class Annotate(Op, tag="Annotate"):
    pod_group: str
    key: str
    value: str


PlanOp = (
    Reserve | Bind | Pipeline | Evict | SetCondition | ClearCondition | PodGroupEvent | PodEvent | Annotate
    | SetCorePods
)


class ResourceFigures(msgspec.Struct, frozen=True, kw_only=True):
    """One queue, one resource (gpu in milli-GPU, cpu in millicores, memory in bytes; -1 unlimited)."""

    deserved: int = 0
    fair_share: int = 0
    allocated: int = 0
    limit: int = -1
    allocated_non_preemptible: int = 0
    request: int = 0


class QueueFigures(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    gpu: ResourceFigures = ResourceFigures()
    cpu: ResourceFigures = ResourceFigures()
    memory: ResourceFigures = ResourceFigures()


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    revision: int
    plan_id: str
    ops: tuple[PlanOp, ...] = ()
    queues: tuple[QueueFigures, ...] = ()

    def of(self, kind: type) -> list:
        return [op for op in self.ops if isinstance(op, kind)]


class CycleTimings(msgspec.Struct, frozen=True, kw_only=True):
    """Milliseconds, measured with the injected timer (the core itself never reads a clock)."""

    snapshot_build_ms: float = 0.0
    total_duration_ms: float = 0.0
    action_durations_ms: dict[str, float] = {}
    counters: dict[str, int] = {}  # e.g. reclaim.victims_simulated, reclaim.budget_exhausted (core II)


_encoder = msgspec.json.Encoder()


def make_plan(revision: int, ops: list, queues: list[QueueFigures]) -> Plan:
    body = _encoder.encode((revision, ops, queues))
    plan_id = hashlib.sha256(body).hexdigest()[:32]
    return Plan(revision=revision, plan_id=plan_id, ops=tuple(ops), queues=tuple(queues))

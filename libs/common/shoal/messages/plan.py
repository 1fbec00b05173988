"""Plans on the wire: the planner's decisions for one shard, applied by the binder.

Ops mirror `shoal.core.plan`; `pod` and `pod_group` are `namespace/name`.
"""

from __future__ import annotations

import msgspec

from shoal.messages.base import Message


class Op(msgspec.Struct, frozen=True, kw_only=True, tag_field="op"):
    pass


class BindOp(Op, frozen=True, kw_only=True, tag="bind"):
    pod: str
    pod_uid: str = ""
    node: str
    gpu_groups: tuple[str, ...] = ()
    fraction: str | None = None  # GPU portion as KAI formats it, e.g. "0.50"
    resource_type: str = "Regular"  # Regular | Fraction
    pod_group: str = ""


class PipelineOp(Op, frozen=True, kw_only=True, tag="pipeline"):
    pod: str
    node: str
    pod_group: str = ""


class EvictOp(Op, frozen=True, kw_only=True, tag="evict"):
    pod: str
    pod_uid: str = ""
    action: str
    by: str
    message: str
    pod_group: str = ""


class ReserveOp(Op, frozen=True, kw_only=True, tag="reserve"):
    node: str
    gpu_group: str
    gpu_index: int = -1


class ConditionOp(Op, frozen=True, kw_only=True, tag="condition"):
    pod_group: str
    reason: str
    message: str
    details: dict = {}


class ClearConditionOp(Op, frozen=True, kw_only=True, tag="clear_condition"):
    pod_group: str


class EventOp(Op, frozen=True, kw_only=True, tag="event"):
    kind: str  # Pod | PodGroup
    name: str  # ns/name
    reason: str
    message: str
    event_type: str = "Normal"


class AnnotateOp(Op, frozen=True, kw_only=True, tag="annotate"):
    pod_group: str
    key: str
    value: str


AnyOp = BindOp | PipelineOp | EvictOp | ReserveOp | ConditionOp | ClearConditionOp | EventOp | AnnotateOp


class QueueFigures(msgspec.Struct, frozen=True, kw_only=True):
    deserved: float
    fair_share: float
    allocated: float
    limit: float
    allocated_non_preemptible: float = 0
    request: float = 0


class PlanIssued(Message, frozen=True, kw_only=True, tag="plan_issued"):
    shard: str
    plan_id: str
    revision: int
    ops: tuple[AnyOp, ...]
    queues: dict[str, dict[str, QueueFigures]] = {}


class BindResult(Message, frozen=True, kw_only=True, tag="bind_result"):
    shard: str
    plan_id: str
    pod: str
    node: str
    ok: bool
    error: str = ""


class FairShareComputed(Message, frozen=True, kw_only=True, tag="fairshare_computed"):
    shard: str
    revision: int
    queues: dict[str, dict[str, QueueFigures]]

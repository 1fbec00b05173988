"""Plans on the wire: the planner's decisions for one shard, applied by the binder.

The ops are the core's own plan operations (`shoal.core.plan`: Reserve, Bind, Pipeline, Evict,
SetCondition, ClearCondition, PodGroupEvent, PodEvent, Annotate), tagged by `op`, so what the
planner decided and what the binder applies cannot drift apart.
"""

from __future__ import annotations

from shoal.core.plan import PlanOp, QueueFigures
from shoal.messages.base import Message


class PlanIssued(Message, frozen=True, kw_only=True, tag="plan_issued"):
    shard: str
    plan_id: str
    revision: int
    ops: tuple[PlanOp, ...]
    queues: tuple[QueueFigures, ...] = ()


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
    queues: tuple[QueueFigures, ...]

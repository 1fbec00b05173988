"""What the binder publishes per plan: a BindResult per bind and decision events, each sent at once (the producer
batches them) and awaited together at the end of the plan's phase (`_flush`)."""

from __future__ import annotations

import asyncio

from shoal.adapters.kafka import Publisher
from shoal.core.plan import Bind
from shoal.messages import topics
from shoal.messages.base import new_meta
from shoal.messages.decisions import decision
from shoal.messages.plan import BindResult, PlanIssued


class Publishing:
    """Mixed into `Binder`, whose fields these are."""

    bus: Publisher
    topic_prefix: str
    _publishing: dict[str, list[asyncio.Task]]

    def _result(self, plan: PlanIssued, op: Bind, *, ok: bool, error: str = "") -> None:
        result = BindResult(meta=new_meta("binder", revision=plan.revision), shard=plan.shard,
                            plan_id=plan.plan_id, pod=op.pod, node=op.node, ok=ok, error=error)
        self._send(plan, topics.BIND_RESULTS.full(self.topic_prefix), result)

    def _decision(self, kind: str, plan: PlanIssued, subject: str, data: dict) -> None:
        event = decision(kind, source=f"shoal/binder/{plan.shard}", subject=subject, shard=plan.shard,
                         plan_id=plan.plan_id, revision=plan.revision, data=data)
        self._send(plan, topics.DECISIONS.full(self.topic_prefix), event)

    def _send(self, plan: PlanIssued, topic: str, message) -> None:
        """Start a publish now; `_flush` awaits it with the rest of the plan's phase."""
        task = asyncio.ensure_future(self.bus.publish(topic, message, key=plan.shard))
        self._publishing.setdefault(plan.plan_id, []).append(task)

    async def _flush(self, plan_id: str) -> None:
        """Wait for every publish the plan started; the first failure is raised after all have settled."""
        tasks = self._publishing.pop(plan_id, [])
        if not tasks:
            return
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

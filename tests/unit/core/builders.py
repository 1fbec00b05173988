"""The core tests' fixture DSL: the shared builders (`shoal.core.builders`, whose docstring shows them in use)
and `schedule(snapshot)`, which runs one cycle and reads its plan back (`Result`: `result.bound()`, ...)."""

from __future__ import annotations

from shoal.core.builders import (  # noqa: F401 (the DSL the tests import from here)
    GI,
    NS,
    PRIORITY_CLASSES,
    JobSpec,
    cluster,
    group,
    job,
    node,
    pod,
    pod_of,
    queue,
)
from shoal.core.cycle import run_cycle
from shoal.core.plan import Bind, Pipeline, Plan, PodEvent, PodGroupEvent, Reserve, SetCondition


class Result:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def bound(self) -> dict[str, str]:
        return {op.pod.split("/", 1)[1]: op.node for op in self.plan.of(Bind)}

    def binds(self) -> list[Bind]:
        return self.plan.of(Bind)

    def pipelined(self) -> dict[str, str]:
        return {op.pod.split("/", 1)[1]: op.node for op in self.plan.of(Pipeline)}

    def reserves(self) -> list[Reserve]:
        return self.plan.of(Reserve)

    def condition(self, pg: str) -> SetCondition | None:
        for op in self.plan.of(SetCondition):
            if op.pod_group == f"{NS}/{pg}":
                return op
        return None

    def pg_events(self, pg: str) -> list[PodGroupEvent]:
        return [op for op in self.plan.of(PodGroupEvent) if op.pod_group == f"{NS}/{pg}"]

    def pod_events(self, pod_name: str) -> list[PodEvent]:
        return [op for op in self.plan.of(PodEvent) if op.pod == f"{NS}/{pod_name}"]

    def queue(self, name: str):
        for q in self.plan.queues:
            if q.name == name:
                return q
        raise KeyError(name)


def schedule(snapshot) -> Result:
    return Result(run_cycle(snapshot))

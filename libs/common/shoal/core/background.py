"""Background pods (KAI v0.18, pod label `kai.scheduler/background=true`): planned as if absent.

The session builds each running background pod of a Shoal-scheduled PodGroup as releasing: its room on its
node is free for every action to plan on (a placement that needs it is pipelined, as onto any releasing
pod), and it counts in no queue's figures. Once the actions are done, `restore` offers every background
pod its place back, node by node, pods by namespace/name: a pod whose room is still there (idle plus
releasing on its node, and on each of its shared GPUs the releasing portion it holds) keeps running and
nothing is sent for it; the others are evicted with the action `backgroundpods` and KAI's message, by the
PodGroup of the first placement of this plan that took room on that node. A pod that consolidation moves
counts as such a placement where it was re-placed: the plan carries only its eviction (its controller
recreates it), but the consolidation holds only if that room is there for it. A pod whose eviction a
PodDisruptionBudget blocks is not treated as background (it could not make room).
"""

from __future__ import annotations

import itertools

from shoal.core.context import Context
from shoal.core.model import Pod
from shoal.core.session import DEVICE_MILLI, GPU_MEMORY_PLACEHOLDER_MIB, NodeState, Task
from shoal.core.statement import Change

ACTION = "backgroundpods"
EVICTION_MESSAGE = "Evicted to make room for a workload on this node"


def _share(pod: Pod, node: NodeState) -> int:
    """The milli-device a running fractional pod holds on each of its shared GPUs (as the session counts it)."""
    frac = pod.fraction
    if frac is None:
        return 0
    if frac.portion_milli is not None:
        return frac.portion_milli
    mem = node.gpu_mem or GPU_MEMORY_PLACEHOLDER_MIB
    return -(-(frac.gpu_memory_mib or 0) * DEVICE_MILLI // mem)


def _fits(node: NodeState, pod: Pod) -> bool:
    if pod.cpu_milli > node.idle_cpu + node.rel_cpu or pod.memory_bytes > node.idle_mem + node.rel_mem:
        return False
    if 1 > node.idle_pods + node.rel_pods:
        return False
    if pod.gpu_groups:
        share = _share(pod, node)
        return all((g := node.groups.get(gid)) is not None and g.releasing >= share for gid in pod.gpu_groups)
    return pod.gpus <= node.idle_gpus + node.rel_gpus


def _take_back(node: NodeState, pod: Pod) -> None:
    """The pod stays: its room is no longer releasing."""
    node.rel_cpu -= pod.cpu_milli
    node.rel_mem -= pod.memory_bytes
    node.rel_pods -= 1
    if pod.gpu_groups:
        share = _share(pod, node)
        for gid in pod.gpu_groups:
            node.groups[gid].releasing -= share
        return
    node.rel_gpus -= pod.gpus


def _task_of(ctx: Context, pod: Pod) -> Task | None:
    key = f"{pod.namespace}/{pod.pod_group}"
    if key not in ctx.session.jobs:
        return None
    job = ctx.session.jobs[key]
    return next((t for t in job.tasks if t.pod.uid == pod.uid), None)


def restore(ctx: Context) -> None:
    """Keep every background pod that still fits; evict the others (appended to the committed ops)."""
    session = ctx.session
    if not session.background:
        return
    takers: dict[int, str] = {}  # node index -> PodGroup of the first placement that took releasing room
    for op in itertools.chain(ctx.accepted, ctx.moved):
        if op.kind == "pipeline" and op.task.job is not None:
            takers.setdefault(op.node.index, op.task.job.key)
    pods = sorted(session.background, key=lambda entry: (entry[0].index, entry[1].namespace, entry[1].name))
    evictions: list[Change] = []
    for node, pod in pods:
        if _fits(node, pod):
            _take_back(node, pod)
            continue
        task = _task_of(ctx, pod)
        if task is None:  # pragma: no cover - the session only lists pods of known PodGroups
            continue
        op = Change("evict", task, node)
        op.action, op.by, op.message = ACTION, takers.get(node.index, ""), EVICTION_MESSAGE
        evictions.append(op)
    for op in evictions:
        ctx.accepted.append(op)
        ctx.job_ops.setdefault(op.task.job.key, []).append(op)  # type: ignore[union-attr]

"""Declarative builders of core snapshots, shared by the core's tests (tests/unit/core/builders.py adds
`schedule` and its `Result`) and the `shoal bench` generators (in the spirit of KAI's test_utils).

    snap = cluster(
        nodes=[node("n1", gpus=4)],
        queues=[queue("q", gpu=(2, -1))],
        jobs=[job("j", queue="q", pods=3, gpus=2, min_member=3)],
    )
    result = schedule(snap)
    assert result.bound() == {...}

Quantities: cpu in millicores, memory in bytes, gpu quotas in GPUs (converted to milli-GPU here).
`group` and `pod_of` make one PodGroup and one pod (namespace `ns`, uid `uid-<name>` unless given); the
benchmarks' generators use them with their own namespace and uids. Queues hang under a top-level `root` queue with -1 everywhere unless `parent=None`; resources not named
are {quota -1, limit -1, weight 1} (reference §10 conventions). Nodes carry 40960 MiB of GPU memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shoal.core.model import (
    FractionRequest,
    Node,
    Pod,
    PodGroup,
    PriorityClass,
    Queue,
    QueueResource,
    ShardConfig,
    SubGroup,
    make_snapshot,
)

GI = 1024**3
NS = "ns"

PRIORITY_CLASSES = (
    PriorityClass(name="train", value=50),
    PriorityClass(name="build-preemptible", value=75),
    PriorityClass(name="build", value=100),
    PriorityClass(name="inference", value=125),
)


def node(
    name: str,
    gpus: int = 8,
    cpu: int = 64_000,
    memory: int = 512 * GI,
    pods: int = 110,
    gpu_memory: int | None = 40960,
    **kw,
) -> Node:
    return Node(
        name=name,
        gpus=gpus,
        cpu_milli=cpu,
        memory_bytes=memory,
        pods=pods,
        gpu_memory_mib=gpu_memory if gpus else kw.pop("gpu_memory_mib", None),
        **kw,
    )


def _res(spec, scale: int) -> QueueResource:
    if spec is None:
        return QueueResource(quota=-1, limit=-1, weight=1)
    quota, limit, *rest = (*spec, None)[:3] if len(spec) < 3 else spec
    weight = rest[0] if rest and rest[0] is not None else 1
    return QueueResource(
        quota=-1 if quota == -1 else int(quota * scale),
        limit=None if limit is None else (-1 if limit == -1 else int(limit * scale)),
        weight=weight,
    )


def queue(
    name: str,
    parent: str | None = "root",
    gpu=None,
    cpu=None,
    memory=None,
    priority: int = 100,
    created: int = 0,
    display_name: str = "",
) -> Queue:
    """gpu/cpu/memory = (quota, limit[, weight]) with gpu in GPUs, cpu in millicores, memory in bytes."""
    return Queue(
        name=name,
        parent=parent,
        gpu=_res(gpu, 1000),
        cpu=_res(cpu, 1),
        memory=_res(memory, 1),
        priority=priority,
        created=created,
        display_name=display_name,
    )


def group(name: str, queue: str = "q", *, namespace: str = NS, uid: str | None = None, min_member: int = 1,
          priority_class: str = "train", created: int = 0, **kw) -> PodGroup:
    """One PodGroup (uid `uid-<name>` unless given)."""
    return PodGroup(namespace=namespace, name=name, uid=uid if uid is not None else f"uid-{name}", queue=queue,
                    min_member=min_member, priority_class_name=priority_class, created=created, **kw)


def pod_of(name: str, pod_group: str, *, namespace: str = NS, uid: str | None = None, **fields) -> Pod:
    """One pod of PodGroup `pod_group` (uid `uid-<name>` unless given); `fields` are the core Pod's."""
    return Pod(uid=uid if uid is not None else f"uid-{name}", namespace=namespace, name=name, pod_group=pod_group,
               **fields)


@dataclass
class JobSpec:
    group: PodGroup
    pods: list[Pod] = field(default_factory=list)


def pod(
    name: str,
    gpus: int = 0,
    cpu: int = 0,
    memory: int = 0,
    node_name: str | None = None,
    fraction: float | None = None,
    gpu_memory: int | None = None,
    devices: int = 1,
    **kw,
) -> dict:
    return dict(
        name=name,
        gpus=gpus,
        cpu=cpu,
        memory=memory,
        node_name=node_name,
        fraction=fraction,
        gpu_memory=gpu_memory,
        devices=devices,
        **kw,
    )


def job(
    name: str,
    queue: str = "q",
    pods: int | list[dict] = 1,
    gpus: int = 0,
    cpu: int = 0,
    memory: int = 0,
    min_member: int = 1,
    priority_class: str = "train",
    running_on: list[str] | None = None,
    fraction: float | None = None,
    gpu_memory: int | None = None,
    created: int = 0,
    subgroups: tuple[SubGroup, ...] = (),
    min_subgroup: int | None = None,
    **group_kw,
) -> JobSpec:
    made = group(name, queue, min_member=min_member, priority_class=priority_class, created=created,
                 subgroups=subgroups, min_subgroup=min_subgroup, **group_kw)
    if isinstance(pods, int):
        running_on = running_on or []
        specs = [
            pod(
                f"{name}-{i}",
                gpus=gpus,
                cpu=cpu,
                memory=memory,
                fraction=fraction,
                gpu_memory=gpu_memory,
                node_name=running_on[i] if i < len(running_on) else None,
            )
            for i in range(pods)
        ]
    else:
        specs = pods
    out = JobSpec(made)
    for i, s in enumerate(specs):
        s = dict(s)
        frac = s.pop("fraction")
        mem = s.pop("gpu_memory")
        devices = s.pop("devices")
        fr = None
        if frac is not None or mem is not None:
            fr = FractionRequest(
                portion_milli=None if frac is None else int(round(frac * 1000)),
                gpu_memory_mib=mem,
                num_devices=devices,
            )
        node_name = s.pop("node_name")
        out.pods.append(
            pod_of(
                s.pop("name"),
                name,
                cpu_milli=s.pop("cpu"),
                memory_bytes=s.pop("memory"),
                gpus=s.pop("gpus"),
                fraction=fr,
                node_name=node_name,
                phase="Running" if node_name else "Pending",
                created=s.pop("created", i),
                **s,
            )
        )
    return out


def cluster(
    nodes=(),
    queues=(),
    jobs=(),
    config: ShardConfig | None = None,
    extra_pods=(),
    now: int = 1_000_000,
    revision: int = 1,
    root: bool = True,
):
    qs = list(queues)
    if root and not any(q.name == "root" for q in qs):
        qs.append(queue("root", parent=None))
    pods = [p for j in jobs for p in j.pods] + list(extra_pods)
    return make_snapshot(
        nodes=nodes,
        pods=pods,
        pod_groups=[j.group for j in jobs],
        queues=qs,
        priority_classes=PRIORITY_CLASSES,
        config=config,
        now=now,
        revision=revision,
    )

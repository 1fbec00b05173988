"""The jobs of `shoal bench soak` (pure): what arrives, in which queue, at which priority, for how long.

Four kinds, each a PodGroup of its own with pods naming it by the `pod-group-name` annotation:
- `gang`: 2-4 one-GPU pods, minMember = size (all or nothing);
- `elastic`: 4 one-GPU pods, minMember 2 (runs with 2, grows to 4);
- `whole`: one pod of 1 or 2 GPUs;
- `fraction`: one pod with `gpu-fraction: 0.5` or `0.25` (shares a GPU through a reservation pod).
Every pod also asks for CPU and memory, so those are committed too. Three queues share the pool with a GPU
quota each; which queue is busiest turns every `wave_s` seconds, so the busy one goes over its quota and the next
one reclaims from it. One job in five is `build` (priority 100, not preemptible) and preempts `train` (50) work
of its own queue.

    gen = JobGen(random.Random(7), queues=["qa", "qb", "qc"], pool="pool-x")
    job = gen.next(now_s=12.0)                 # a Job: name, kind, queue, priority, pods, min_member, run_s
    job_manifests(job, "ns")                   # [PodGroup, pod, pod, ...]
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from shoal.core.kai_labels import FRACTION, NODE_POOL_LABEL, POD_GROUP_ANNOTATION, QUEUE_LABEL
from shoal.devstack.bench_pods import GPU

KINDS = ("gang", "elastic", "whole", "fraction")
KIND_WEIGHTS = (0.25, 0.15, 0.3, 0.3)
JOB_LABEL = "shoal.io/soak-job"
PREEMPTOR_SHARE = 0.2  # jobs at priority `build`: they preempt `train` jobs of their own queue
SCHEDULER = "shoal-scheduler"


@dataclass(frozen=True)
class PodSpec:
    name: str
    gpus: int = 0
    fraction: str = ""  # gpu-fraction annotation ("0.5"), no nvidia.com/gpu limit
    cpu_milli: int = 1000
    memory_mi: int = 2048


@dataclass
class Job:
    name: str
    kind: str
    queue: str
    priority: str
    min_member: int
    pods: list[PodSpec]
    run_s: float  # how long it runs once min_member pods are bound
    created_at: float = 0.0
    running_at: float | None = None
    finished_at: float | None = None
    outcome: str = ""  # finished | evicted | cancelled
    evicted_pods: set[str] = field(default_factory=set)

    @property
    def gpus(self) -> float:
        return sum(p.gpus or float(p.fraction or 0) for p in self.pods)


class JobGen:
    """A seeded stream of jobs; `queues[0]` is busiest in the first wave, `queues[1]` in the next, and so on."""

    def __init__(self, rng: random.Random, queues: list[str], pool: str, *, run_s: tuple[float, float] = (20, 90),
                 wave_s: float = 150.0) -> None:
        self.rng = rng
        self.queues = queues
        self.pool = pool
        self.run_s = run_s
        self.wave_s = wave_s
        self.serial = 0

    def queue_at(self, now_s: float) -> str:
        """Half the jobs go to the wave's busy queue, the rest spread over all of them."""
        busy = self.queues[int(now_s // self.wave_s) % len(self.queues)]
        return busy if self.rng.random() < 0.5 else self.rng.choice(self.queues)

    def next(self, now_s: float) -> Job:
        self.serial += 1
        kind = self.rng.choices(KINDS, KIND_WEIGHTS)[0]
        name = f"j{self.serial}-{kind}"
        cpu = self.rng.choice((500, 1000, 2000))
        mem = self.rng.choice((1024, 2048, 4096))
        if kind == "gang":
            size = self.rng.choice((2, 3, 4))
            pods = [PodSpec(f"{name}-{i}", gpus=1, cpu_milli=cpu, memory_mi=mem) for i in range(size)]
            min_member = size
        elif kind == "elastic":
            pods = [PodSpec(f"{name}-{i}", gpus=1, cpu_milli=cpu, memory_mi=mem) for i in range(4)]
            min_member = 2
        elif kind == "whole":
            pods = [PodSpec(f"{name}-0", gpus=self.rng.choice((1, 1, 2)), cpu_milli=cpu, memory_mi=mem)]
            min_member = 1
        else:
            pods = [PodSpec(f"{name}-0", fraction=self.rng.choice(("0.5", "0.25")), cpu_milli=500, memory_mi=1024)]
            min_member = 1
        priority = "build" if self.rng.random() < PREEMPTOR_SHARE else "train"
        return Job(name=name, kind=kind, queue=self.queue_at(now_s), priority=priority, min_member=min_member,
                   pods=pods, run_s=self.rng.uniform(*self.run_s), created_at=now_s)


def podgroup_manifest(job: Job, namespace: str, pool: str) -> dict:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": job.name, "namespace": namespace,
                         "labels": {NODE_POOL_LABEL: pool, JOB_LABEL: job.name}},
            "spec": {"minMember": job.min_member, "queue": job.queue, "priorityClassName": job.priority}}


def pod_manifest(job: Job, pod: PodSpec, namespace: str, pool: str) -> dict:
    annotations = {POD_GROUP_ANNOTATION: job.name}
    requests = {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mi}Mi"}
    resources: dict = {"requests": requests}
    if pod.fraction:
        annotations[FRACTION] = pod.fraction
    else:
        resources["limits"] = {GPU: str(pod.gpus)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": namespace, "annotations": annotations,
                         "labels": {NODE_POOL_LABEL: pool, QUEUE_LABEL: job.queue, JOB_LABEL: job.name}},
            "spec": {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 0, "priorityClassName": job.priority,
                     "nodeSelector": {NODE_POOL_LABEL: pool},
                     "containers": [{"name": "main", "image": "busybox", "resources": resources}]}}


def job_manifests(job: Job, namespace: str, pool: str) -> list[dict]:
    """The job's PodGroup first, then its pods."""
    return [podgroup_manifest(job, namespace, pool), *(pod_manifest(job, p, namespace, pool) for p in job.pods)]


def queue_manifests(parent: str, leaves: list[str], gpu_quota: int) -> list[dict]:
    """A parent queue (no limits) and `leaves` under it, each with `gpu_quota` GPUs deserved, no limit."""
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    out = [{"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": parent},
            "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}}]
    for leaf in leaves:
        out.append({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": leaf},
                    "spec": {"parentQueue": parent,
                             "resources": {"gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
                                           "cpu": unlimited, "memory": unlimited}}})
    return out

"""`shoal bench soak`: churn on the real stack for N minutes with faults injected, then check what must hold.

Jobs arrive open loop (soak_jobs: gangs, elastic gangs, whole GPUs, fractions; three queues with GPU quotas whose
busiest one turns; one job in five preempts), each runs a random time once bound and is then deleted (pods and
PodGroup). A fault (soak_faults: kill -9 of a service, Kafka, Redis or apiserver restart) comes every few
minutes, in rotation. Every `sample_s` the soak samples each service's RSS, Redis keys, Kafka consumer lag and
node commitment (soak_sample). At the end arrivals and faults stop, the cluster settles, the final state is
checked, every job is deleted and the leftovers (reservation pods, leases) are checked again (soak_report).

    result = await run(stack_info, minutes=10)
    print(table(result)); sys.exit(0 if result["passed"] else 1)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.adapters import kube as k
from shoal.core.fields import value_at
from shoal.core.model import DEFAULT_RESERVATION_NAMESPACE
from shoal.devstack import soak_sample as sample
from shoal.devstack.bench_contenders import ISOLATED_LABEL
from shoal.devstack.bench_pods import BENCH_LABEL
from shoal.devstack.soak_checks import orphan_reservations, overcommitted, pending_without_reason
from shoal.devstack.soak_faults import FAULTS, Services, inject, plan_faults
from shoal.devstack.soak_jobs import Job, JobGen, job_manifests, queue_manifests
from shoal.devstack.soak_report import judge, table
from shoal.devstack.soak_watch import PodTracker
from shoal.errors import ConflictError, NotFoundError, TransientError

RESERVATION_NAMESPACE = DEFAULT_RESERVATION_NAMESPACE  # the binder's and node agent's default
GRACE0 = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
__all__ = ["FAULTS", "Options", "run", "table"]


@dataclass(frozen=True)
class Options:
    minutes: float = 10.0
    seed: int = 7
    nodes: int = 6
    gpus: int = 8
    jobs_per_s: float = 0.4
    max_pending: int = 20  # jobs waiting; arrivals pause above it (the backlog stays bounded)
    fault_every_s: float = 120.0
    faults: tuple[str, ...] = FAULTS
    sample_s: float = 15.0
    settle_s: float = 180.0
    warmup_s: float = 120.0


@dataclass
class Soak:
    opts: Options
    info: Any
    kube: k.Kube
    api: Any
    tag: str
    services: Services
    tracker: PodTracker
    gen: JobGen
    rng: random.Random
    nodes: list[str] = field(default_factory=list)
    jobs: dict[str, Job] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)  # pods the soak itself deleted
    faults: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    problems: dict[str, list[str]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    frozen: bool = False  # settling: running jobs no longer finish
    restarting: bool = False  # a fault is under way (a killed service is not dead on its own)
    tasks: set[asyncio.Task] = field(default_factory=set)

    @property
    def namespace(self) -> str:
        return self.tag

    @property
    def pool(self) -> str:
        return f"{self.tag}-pool"

    def now(self) -> float:
        return time.monotonic() - self.started

    def problem(self, check: str, text: str) -> None:
        self.problems.setdefault(check, []).append(f"t={self.now():.0f}s {text}")

    def spawn(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


async def retrying(call: Callable[[], Awaitable[Any]], *, attempts: int = 60, pause_s: float = 2.0) -> Any:
    """`call` until it answers: transient errors (an apiserver restarting) are retried; an object already there
    (create) or already gone (delete) is success."""
    for attempt in range(attempts):
        try:
            return await call()
        except (ConflictError, NotFoundError):
            return None
        except TransientError:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(pause_s)
    return None


# ---- jobs ---------------------------------------------------------------------------------------------------
async def submit(soak: Soak, job: Job) -> None:
    soak.jobs[job.name] = job
    try:
        for doc in job_manifests(job, soak.namespace, soak.pool):
            resource = k.PODGROUPS if doc["kind"] == "PodGroup" else k.PODS
            await retrying(lambda d=doc, r=resource: soak.kube.create(r, d, namespace=soak.namespace))
    except Exception as exc:  # noqa: BLE001 - reported, the soak goes on
        soak.problem("jobs-submitted", f"job {job.name}: {exc}")
        await finish(soak, job, "cancelled")


async def finish(soak: Soak, job: Job, outcome: str) -> None:
    """Delete the job's pods (grace 0) and its PodGroup: the job is done."""
    if job.finished_at is not None:
        return
    job.finished_at, job.outcome = soak.now(), outcome
    for pod in job.pods:
        soak.deleting.add(pod.name)
    try:
        for pod in job.pods:
            await retrying(lambda n=pod.name: soak.kube.delete(k.PODS, n, namespace=soak.namespace, body=GRACE0))
        await retrying(lambda: soak.kube.delete(k.PODGROUPS, job.name, namespace=soak.namespace))
    except Exception as exc:  # noqa: BLE001 - reported, the soak goes on
        soak.problem("jobs-finished", f"job {job.name}: {exc}")


def step_jobs(soak: Soak) -> None:
    """Mark jobs running (min_member bound), finish those whose run time is over or that lost a pod to an
    eviction."""
    tracker, now = soak.tracker, soak.now()
    for job in list(soak.jobs.values()):
        if job.finished_at is not None:
            continue
        bound = [p.name for p in job.pods if p.name in tracker.bound_at]
        if job.running_at is None and len(bound) >= job.min_member:
            job.running_at = now
        evicted = {n for n in bound if n in tracker.gone and n not in soak.deleting}
        if evicted:
            job.evicted_pods |= evicted
            soak.spawn(finish(soak, job, "evicted"))
        elif job.running_at is not None and not soak.frozen and now >= job.running_at + job.run_s:
            soak.spawn(finish(soak, job, "finished"))


def waiting(soak: Soak) -> int:
    return sum(1 for j in soak.jobs.values() if j.finished_at is None and j.running_at is None)


async def arrivals(soak: Soak, until: float) -> None:
    while soak.now() < until:
        await asyncio.sleep(soak.rng.expovariate(soak.opts.jobs_per_s))
        if soak.now() < until and waiting(soak) < soak.opts.max_pending:
            soak.spawn(submit(soak, soak.gen.next(soak.now())))


async def lifecycle(soak: Soak) -> None:
    while True:
        step_jobs(soak)
        await asyncio.sleep(1.0)


# ---- faults and samples -----------------------------------------------------------------------------------------
async def faults(soak: Soak, duration_s: float) -> None:
    o = soak.opts
    for offset, kind in plan_faults(o.faults, duration_s, o.fault_every_s, first_s=min(60.0, o.fault_every_s / 2),
                                    quiet_tail_s=max(60.0, o.fault_every_s / 2)):
        await asyncio.sleep(max(0.0, offset - soak.now()))
        began = soak.now()
        soak.restarting = True
        try:
            record = await inject(kind, soak.services, soak.info.state_dir, soak.rng)
        except Exception as exc:  # noqa: BLE001 - a fault that cannot be undone fails the check, named
            record = {"kind": kind, "error": f"{type(exc).__name__}: {exc}"}
            soak.problem("faults-recovered", f"{kind}: {record['error']}")
        finally:
            soak.restarting = False
        record.update(t=round(began, 1), ready_t=round(soak.now(), 1))
        record.pop("at", None)
        soak.faults.append(record)


async def take_sample(soak: Soak) -> None:
    info, s = soak.info, soak.services
    point: dict[str, Any] = {"t": round(soak.now(), 1), "load": round(os.getloadavg()[0], 2),
                             "jobs_waiting": waiting(soak),
                             "jobs_running": sum(1 for j in soak.jobs.values()
                                                 if j.running_at is not None and j.finished_at is None)}
    point["rss_mb"] = {name: sample.rss_mb(pid) for name, pid in s.pids.items()}
    point["pids"] = dict(s.pids)
    if not soak.restarting:
        for name in s.dead():
            soak.problem("services-alive", f"{name} (pid {s.pids[name]}) died on its own; started again")
            soak.spawn(s.start(name))
    redis_pid = info_pid(info.state_dir, "redis")
    point["redis"] = await sample.bounded(sample.redis_keys(info.redis_url))
    point["redis_pid"] = redis_pid
    point["lag"] = await sample.bounded(sample.consumer_lag(info.kafka_bootstrap, s.topic_prefix))
    state = await sample.bounded(cluster_state(soak))
    if state is not None:
        nodes, pods, reservations, _groups = state
        point["overcommitted"] = overcommitted(nodes, pods + reservations)
        for text in point["overcommitted"]:
            soak.problem("no-overcommit", text)
        point["pods_bound"] = sum(1 for p in pods if p["spec"].get("nodeName"))
        point["reservation_pods"] = len(reservations)
    soak.samples.append(point)


def info_pid(state_dir: str, name: str) -> int:
    from shoal.devstack.procs import read_pid

    found = read_pid(Path(state_dir), name) if state_dir else None
    return found[0] if found else 0


async def sampler(soak: Soak) -> None:
    while True:
        await take_sample(soak)
        await asyncio.sleep(soak.opts.sample_s)


async def cluster_state(soak: Soak) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
    kube = soak.kube
    nodes, _ = await kube.list(k.NODES, label_selector=f"{ISOLATED_LABEL}={soak.tag}")
    # one list of every pod: the soak's pods and the reservation pods are seen at one resourceVersion (two lists
    # would see a fraction bound whose reservation pod the other list missed, or the other way round)
    everything, _ = await kube.list(k.PODS)
    pods = [p for p in everything if p["metadata"].get("namespace") == soak.namespace]
    ours = set(soak.nodes)
    reservations = [r for r in everything if r["metadata"].get("namespace") == RESERVATION_NAMESPACE
                    and value_at(r, "spec", "nodeName") in ours]
    groups, _ = await kube.list(k.PODGROUPS, namespace=soak.namespace)
    return nodes, pods, reservations, groups


# ---- the end: settle, check, drain --------------------------------------------------------------------------
async def poll(soak: Soak, pause_s: float = 3.0) -> tuple[tuple[list[dict], ...], list[str]] | None:
    """After `pause_s`: the cluster's state and the leases in flight, or None when either could not be read."""
    await asyncio.sleep(pause_s)
    state = await sample.bounded(cluster_state(soak))
    leases = await sample.bounded(sample.inflight_entries(soak.info.redis_url))
    return None if state is None or leases is None else (state, leases)


async def settle(soak: Soak) -> dict[str, Any]:
    """Until two polls in a row see the same bound and pending pods, every pending pod with a reason and no
    lease in flight (or settle_s passes); then the final state's problems."""
    soak.frozen = True
    began, last, final = soak.now(), None, {}
    while soak.now() - began < soak.opts.settle_s:
        polled = await poll(soak)
        if polled is None:
            continue
        (nodes, pods, reservations, groups), leases = polled
        final = {"overcommitted": overcommitted(nodes, pods + reservations),
                 "pending_without_reason": pending_without_reason(pods, groups),
                 "orphan_reservations": orphan_reservations(reservations, pods, soak.nodes), "leases": leases,
                 "pods": len(pods), "bound": sum(1 for p in pods if p["spec"].get("nodeName"))}
        shape = (frozenset(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")),
                 frozenset(p["metadata"]["name"] for p in pods))
        quiet = not final["pending_without_reason"] and not leases and not final["orphan_reservations"]
        if quiet and shape == last:
            break
        last = shape if quiet else None
    final["settle_s"] = round(soak.now() - began, 1)
    return final


async def drain(soak: Soak, timeout_s: float = 120.0) -> dict[str, Any]:
    """Delete every job; wait until the pods are gone, then until no reservation pod or lease is left."""
    for job in list(soak.jobs.values()):
        if job.finished_at is None:
            soak.spawn(finish(soak, job, "drained"))
    began = soak.now()
    left: dict[str, Any] = {}
    while soak.now() - began < timeout_s:
        polled = await poll(soak)
        if polled is None:
            continue
        (_nodes, pods, reservations, _groups), leases = polled
        left = {"pods": [p["metadata"]["name"] for p in pods],
                "reservations": orphan_reservations(reservations, [], soak.nodes), "leases": leases}
        if not any(left.values()):
            break
    left["drain_s"] = round(soak.now() - began, 1)
    return left


async def open_arena(soak: Soak) -> list[str]:
    from shoal.devstack.nodes import create_gpu_nodes

    labels = {BENCH_LABEL: soak.tag}
    await soak.kube.create(k.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": soak.namespace, "labels": labels}})
    for doc in queue_manifests(f"{soak.tag}-root", soak.gen.queues, soak.opts.nodes * soak.opts.gpus // 3):
        await soak.kube.create(k.QUEUES, doc)
    names = [f"{soak.pool}-n{i}" for i in range(soak.opts.nodes)]
    return await create_gpu_nodes(soak.api, names, gpus=soak.opts.gpus, pool=soak.pool, cpu="32", memory="128Gi",
                                  pods=40, labels={**labels, ISOLATED_LABEL: soak.tag})


async def close_arena(soak: Soak) -> list[str]:
    from shoal.devstack.nodes import delete_nodes

    leftovers = []
    with contextlib.suppress(NotFoundError, TransientError):
        await soak.kube.request("DELETE", k.PODS.path(soak.namespace), body=GRACE0)
    with contextlib.suppress(NotFoundError, TransientError):
        reservations, _ = await soak.kube.list(k.PODS, namespace=RESERVATION_NAMESPACE)
        for r in reservations:
            if value_at(r, "spec", "nodeName") in set(soak.nodes):
                leftovers.append(f"reservation pod {r['metadata']['name']}")
                await retrying(lambda n=r["metadata"]["name"]: soak.kube.delete(
                    k.PODS, n, namespace=RESERVATION_NAMESPACE, body=GRACE0))
    for name in [soak.namespace]:
        await retrying(lambda n=name: soak.kube.delete(k.NAMESPACES, n))
    for name in [*soak.gen.queues, f"{soak.tag}-root"]:
        await retrying(lambda n=name: soak.kube.delete(k.QUEUES, n))
    await delete_nodes(soak.api, soak.nodes)
    return leftovers


async def run(info: Any, opts: Options, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    from shoal.devstack.scheduler import install_base
    from shoal.settings import KubeSettings

    say = progress or (lambda _line: None)
    tag = f"sk{uuid.uuid4().hex[:6]}"
    state = Path(tempfile.mkdtemp(prefix="shoal-soak-"))
    await install_base(info.kubeconfig)
    api = await k.connect_kube(KubeSettings(kubeconfig=info.kubeconfig))
    kube = k.Kube(api)
    rng = random.Random(opts.seed)
    queues = [f"{tag}-q{c}" for c in "abc"]
    soak = Soak(opts=opts, info=info, kube=kube, api=api, tag=tag, rng=rng, tracker=PodTracker(kube, tag),
                services=Services(state, info, tag=tag, pool=f"{tag}-pool"),
                gen=JobGen(random.Random(opts.seed + 1), queues, f"{tag}-pool"))
    duration = opts.minutes * 60
    load_before = [round(x, 2) for x in os.getloadavg()]
    workers: list[asyncio.Task] = []
    try:
        soak.nodes = await open_arena(soak)
        say(f"soak {tag}: {len(soak.nodes)} nodes x {opts.gpus} GPUs, queues {', '.join(queues)}; starting services")
        await soak.services.start_all()
        soak.started = time.monotonic()
        workers = [asyncio.create_task(w) for w in (soak.tracker.run(), lifecycle(soak), sampler(soak))]
        fault_task = asyncio.create_task(faults(soak, duration))
        progress_task = asyncio.create_task(report_progress(soak, say))
        await arrivals(soak, duration)
        await fault_task
        progress_task.cancel()
        say(f"soak {tag}: {opts.minutes:g} min of churn done; settling")
        final = await settle(soak)
        await take_sample(soak)
        lag_final = await sample.bounded(sample.consumer_lag(info.kafka_bootstrap, soak.services.topic_prefix))
        say(f"soak {tag}: settled in {final.get('settle_s')} s; draining")
        drained = await drain(soak)
        decisions = await sample.bounded(sample.read_topic(
            info.kafka_bootstrap, f"{soak.services.topic_prefix}shoal.decisions.v1"), 120) or []
    finally:
        for task in [*workers, *soak.tasks]:
            task.cancel()
        soak.services.stop_all()
        leftovers = await close_arena(soak)
        await api.close()
    return judge(soak, final=final, drained=drained, lag_final=lag_final or {}, decisions=decisions,
                 leftovers=leftovers, load_before=load_before, state_dir=str(state))


async def report_progress(soak: Soak, say: Callable[[str], None]) -> None:
    while True:
        await asyncio.sleep(60)
        last = soak.samples[-1] if soak.samples else {}
        done = sum(1 for j in soak.jobs.values() if j.finished_at is not None)
        say(f"t={soak.now():.0f}s jobs {len(soak.jobs)} ({done} done, {waiting(soak)} waiting), faults "
            f"{len(soak.faults)}, redis keys {(last.get('redis') or {}).get('total')}, load {last.get('load')}, "
            f"problems {sum(len(v) for v in soak.problems.values())}")

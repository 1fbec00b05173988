"""The phases of `shoal bench e2e`, each in an arena of its own: a fresh namespace and queue, fresh fake nodes
in a node pool of its own, and a watcher process; all of it deleted (and waited for) when the phase ends.

- `backlog`: the pods exist before the scheduler starts; the clock starts at its launch;
- `steady`: the scheduler is up; pods arrive open loop at a fixed rate (each create at its own time, never
  waiting for earlier ones);
- `bind-ceiling`: nobody schedules; pods exist, then the benchmark posts their bindings itself, 64 in flight;
- `kai-writes`: the same, with every write KAI's model asks of a scheduler per pod (`bench_kai_writes`).

Each returns one record: kind, scheduler, repetition, position, pods, bound, figures, cpu_s, load average.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.adapters import kube as k
from shoal.core.fields import value_at
from shoal.core.model import DEFAULT_RESERVATION_NAMESPACE
from shoal.devstack import bench_contenders as contenders
from shoal.devstack.bench_kai_writes import KaiWriter
from shoal.devstack.bench_pods import (
    BENCH_LABEL,
    Flavour,
    PodPlan,
    binding,
    nodes_needed,
    pod_manifest,
    pod_mix,
    podgroup_manifest,
    queue_manifest,
)
from shoal.devstack.bench_stats import figures_by_kind, latency_figures, rate, ready_figures, ready_latencies
from shoal.devstack.bench_watcher import BoundLog, watcher_spec
from shoal.devstack.procs import launch, stop_process, wait_ready
from shoal.errors import NotFoundError, TransientError

RESERVATION_NAMESPACE = DEFAULT_RESERVATION_NAMESPACE  # the binder's and node agent's default
CREATE_PARALLEL = 32
BIND_PARALLEL = 64


@dataclass
class Bench:
    """What every phase of one run shares."""

    info: Any  # StackInfo
    api: Any  # kubernetes_asyncio ApiClient
    kube: k.Kube
    state_dir: Path
    run_tag: str
    timeout_s: float = 300.0
    gpus_per_node: int = 8
    nodes: int = 0  # 0: sized to the mix
    serial: int = 0
    leftovers: list[str] = field(default_factory=list)  # what a phase could not delete (should stay empty)

    def next_tag(self) -> str:
        self.serial += 1
        return f"{self.run_tag}p{self.serial}"


@dataclass
class Arena:
    tag: str
    namespace: str
    pool: str
    nodes: list[str]


# a ceiling's work: given its arena, pods, their uids and where each job adds its seconds up to its binding
Jobs = Callable[[Arena, list[PodPlan], dict[str, str], list[float]], list[Callable[[], Awaitable[None]]]]


async def gather_bounded(limit: int, jobs: Iterable[Callable[[], Awaitable[Any]]]) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await job()

    return await asyncio.gather(*(one(job) for job in jobs))


async def open_arena(bench: Bench, plans: list[PodPlan]) -> Arena:
    from shoal.devstack.nodes import create_gpu_nodes

    tag = bench.next_tag()
    arena = Arena(tag=tag, namespace=tag, pool=f"{tag}-pool", nodes=[])
    labels = {BENCH_LABEL: bench.run_tag}
    await bench.kube.create(k.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": arena.namespace, "labels": labels}})
    await bench.kube.create(k.QUEUES, queue_manifest(arena.namespace))
    count = bench.nodes or nodes_needed(plans, bench.gpus_per_node)
    names = [f"{arena.pool}-n{i}" for i in range(count)]
    arena.nodes = await create_gpu_nodes(bench.api, names, gpus=bench.gpus_per_node, pool=arena.pool,
                                         labels={**labels, contenders.ISOLATED_LABEL: tag})
    return arena


async def close_arena(bench: Bench, arena: Arena) -> None:
    """Delete the arena's pods (grace 0), the reservation pods on its nodes, its namespace, queue and nodes; wait
    until the namespace is gone, so the next phase does not share the apiserver with this one's deletions."""
    from shoal.devstack.nodes import delete_nodes

    kube = bench.kube
    grace0 = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    # thousands of pods outlast the client's request timeout: the server goes on deleting them, and the
    # namespace's deletion (waited for below) removes whatever is left
    with contextlib.suppress(NotFoundError, TransientError):
        await kube.request("DELETE", k.PODS.path(arena.namespace), body=grace0)
    with contextlib.suppress(NotFoundError):
        reservations, _ = await kube.list(k.PODS, namespace=RESERVATION_NAMESPACE)
        ours = [p["metadata"]["name"] for p in reservations if value_at(p, "spec", "nodeName") in set(arena.nodes)]
        await gather_bounded(CREATE_PARALLEL, [_deleter(kube, n, RESERVATION_NAMESPACE, grace0) for n in ours])
    for resource in (k.NAMESPACES, k.QUEUES):
        with contextlib.suppress(NotFoundError):
            await kube.delete(resource, arena.namespace)
    await delete_nodes(bench.api, arena.nodes)
    deadline = time.monotonic() + bench.timeout_s
    while time.monotonic() < deadline:
        try:
            await kube.get(k.NAMESPACES, arena.namespace)
        except NotFoundError:
            return
        await asyncio.sleep(0.5)
    bench.leftovers.append(f"namespace {arena.namespace}")


def _deleter(kube: k.Kube, name: str, namespace: str, body: dict) -> Callable[[], Awaitable[None]]:
    async def delete() -> None:
        with contextlib.suppress(NotFoundError):
            await kube.delete(k.PODS, name, namespace=namespace, body=body)

    return delete


async def create_pods(bench: Bench, arena: Arena, plans: list[PodPlan], flavour: Flavour) -> None:
    """The gangs' PodGroups (Shoal only), then the pods, CREATE_PARALLEL requests in flight."""
    if flavour == "shoal":
        await create_groups(bench, arena, plans)
    await gather_bounded(CREATE_PARALLEL, [
        _creator(bench.kube, k.PODS, pod_manifest(p, arena.namespace, arena.pool, flavour), arena.namespace)
        for p in plans])


async def create_groups(bench: Bench, arena: Arena, plans: list[PodPlan]) -> None:
    """One PodGroup (minMember = its size) per gang of `plans`."""
    ns = arena.namespace
    await gather_bounded(CREATE_PARALLEL, [
        _creator(bench.kube, k.PODGROUPS, podgroup_manifest(ns, p.group or "", p.group_size, ns, arena.pool), ns)
        for p in plans if p.first_of_group])


def _creator(kube: k.Kube, resource: k.Resource, body: dict, namespace: str) -> Callable[[], Awaitable[Any]]:
    return lambda: kube.create(resource, body, namespace=namespace)


class Watcher:
    """The watcher process of one arena (bench_watcher), started and waited for in `__aenter__`."""

    def __init__(self, bench: Bench, arena: Arena) -> None:
        self.bench = bench
        self.log = BoundLog(bench.state_dir / f"watch-{arena.namespace}.jsonl")
        self.spec = watcher_spec(bench.info.kubeconfig, arena.namespace, self.log.path, self.log)
        self.pid = 0

    async def __aenter__(self) -> BoundLog:
        self.pid = launch(self.bench.state_dir, self.spec)
        await asyncio.to_thread(wait_ready, self.bench.state_dir, self.spec, self.pid)
        return self.log

    async def __aexit__(self, *exc: object) -> None:
        stop_process(self.bench.state_dir, self.spec.name)


class Meter:
    """CPU seconds per component and the load average across a phase."""

    def __init__(self, bench: Bench, running: contenders.Running | None = None) -> None:
        """`running` None: the scheduler starts later (set `.running`) and counts from its launch."""
        self.stack = contenders.stack_pids(bench.info.state_dir)
        self.running = running
        self.load_before = [round(x, 2) for x in os.getloadavg()]
        self.before = self._sample()

    def _sample(self) -> dict[str, float]:
        out = {name: contenders.cpu_seconds(pid) for name, pid in self.stack.items()}
        out["bench-creator"] = time.process_time()
        if self.running is not None:
            out.update(self.running.cpu_seconds())
        return out

    def end(self, watcher_pid: int) -> dict[str, Any]:
        after = self._sample()
        after["bench-watcher"] = contenders.cpu_seconds(watcher_pid)
        cpu = {name: round(value - self.before.get(name, 0.0), 2) for name, value in after.items()}
        rss = self.running.peak_rss_mb() if self.running is not None else {}
        return {"cpu_s": cpu, "peak_rss_mb": rss, "load_before": self.load_before,
                "load_after": [round(x, 2) for x in os.getloadavg()]}


async def groups_settled(log: BoundLog, plans: list[PodPlan], flavour: Flavour, timeout_s: float) -> dict[str, float]:
    """Shoal's work for the pods is done once every pod's PodGroup exists too (a bare pod's may follow its bind):
    wait for them (the meter reads CPU after), and report how long after the last bind the last one came."""
    if flavour != "shoal":
        return {}
    expected = len({p.group for p in plans if p.group}) + sum(1 for p in plans if not p.group)
    complete = await log.wait_for_groups(expected, timeout_s)
    last_bound = max(log.bound.values(), default=0.0)
    last_group = max(log.groups.values(), default=last_bound)
    return {"groups_settled_s": round(max(0.0, last_group - last_bound), 3) if complete else -1.0}


def _record(kind: str, scheduler: str, arena: Arena, plans: list[PodPlan], bound: dict[str, float],
            figures: dict[str, float], meter: dict[str, Any], **extra: Any) -> dict[str, Any]:
    names = {p.name for p in plans}
    return {"kind": kind, "scheduler": scheduler, "namespace": arena.namespace, "nodes": len(arena.nodes),
            "pods": len(plans), "bound": len(names & bound.keys()), "figures": figures, **meter, **extra}


async def backlog(bench: Bench, scheduler: str, pods: int) -> dict[str, Any]:
    """Pods made while `scheduler` is stopped; then it starts: launch → ready, → first and last bound."""
    plans = pod_mix(pods, "b")
    flavour: Flavour = "shoal" if scheduler == contenders.SHOAL else "plain"
    arena = await open_arena(bench, plans)
    running: contenders.Running | None = None
    try:
        await create_pods(bench, arena, plans, flavour)
        watcher = Watcher(bench, arena)
        async with watcher as log:
            meter = Meter(bench)
            running = await asyncio.to_thread(contenders.start, scheduler, bench.state_dir, bench.info,
                                              tag=arena.tag, pool=arena.pool)
            meter.running = running
            await log.wait_for({p.name for p in plans}, bench.timeout_s)
            settled = await groups_settled(log, plans, flavour, bench.timeout_s)
            measured = meter.end(watcher.pid)
        times = [log.bound[p.name] for p in plans if p.name in log.bound]
        launched = running.launched_at
        first, last = (min(times), max(times)) if times else (launched, launched)
        figures = {"startup_s": round(running.ready_at - launched, 3),
                   "first_bound_s": round(first - launched, 3), "last_bound_s": round(last - launched, 3),
                   "drain_from_launch_pods_per_s": rate(len(times), last - launched),
                   "drain_bound_pods_per_s": rate(len(times) - 1, last - first),
                   **{k_: v for k_, v in latency_figures([(t - launched) * 1000 for t in times]).items()
                      if k_ in ("p50_ms", "p99_ms")}, **settled}
        return _record("backlog", scheduler, arena, plans, log.bound, figures, measured)
    finally:
        if running is not None:
            contenders.stop(bench.state_dir, running)
            bench.leftovers += [f"process {n}" for n in running.alive()]
        await close_arena(bench, arena)


async def bind_ceiling(bench: Bench, pods: int) -> dict[str, Any]:
    """The apiserver's own bind rate: pods exist, then their bindings are posted BIND_PARALLEL at a time."""
    def jobs(arena: Arena, plans: list[PodPlan], uids: dict[str, str],
             posted: list[float]) -> list[Callable[[], Awaitable[None]]]:
        def poster(i: int, plan: PodPlan) -> Callable[[], Awaitable[None]]:
            async def post() -> None:
                sent = time.monotonic()
                await bench.kube.create(k.PODS, binding(arena.namespace, plan.name, arena.nodes[i % len(arena.nodes)]),
                                        namespace=arena.namespace, name=plan.name, subresource="binding")
                posted.append(time.monotonic() - sent)

            return post

        return [poster(i, p) for i, p in enumerate(plans)]

    return await _ceiling(bench, pod_mix(pods, "c"), "bind-ceiling", "apiserver-bind", jobs)


async def kai_writes_ceiling(bench: Bench, pods: int) -> dict[str, Any]:
    """The apiserver's rate for a KAI-compatible scheduler: pods (and the gangs' PodGroups) exist, then the
    benchmark makes each pod's writes (`bench_kai_writes`), BIND_PARALLEL pods at a time; a post is one pod's
    writes up to its binding."""
    def jobs(arena: Arena, plans: list[PodPlan], uids: dict[str, str],
             posted: list[float]) -> list[Callable[[], Awaitable[None]]]:
        return KaiWriter(bench.kube, arena.namespace, arena.nodes, uids, posted).jobs(plans)

    return await _ceiling(bench, pod_mix(pods, "w"), "kai-writes", "apiserver-kai-writes", jobs, groups=True)


async def _ceiling(bench: Bench, plans: list[PodPlan], kind: str, name: str, jobs: Jobs, *,
                   groups: bool = False) -> dict[str, Any]:
    """Pods made unscheduled (the gangs' PodGroups first with `groups`), then `jobs` (given the pods' uids) run
    BIND_PARALLEL at a time, each adding to `posted` the seconds it took up to its binding."""
    arena = await open_arena(bench, plans)
    try:
        if groups:
            await create_groups(bench, arena, plans)
        await create_pods(bench, arena, plans, "unscheduled")
        items, _ = await bench.kube.list(k.PODS, namespace=arena.namespace)
        uids = {item["metadata"]["name"]: item["metadata"]["uid"] for item in items}
        watcher = Watcher(bench, arena)
        async with watcher as log:
            meter = Meter(bench)
            posted: list[float] = []
            began = time.monotonic()
            await gather_bounded(BIND_PARALLEL, jobs(arena, plans, uids, posted))
            answered = time.monotonic()
            await log.wait_for({p.name for p in plans}, bench.timeout_s)
            measured = meter.end(watcher.pid)
        seen = max(log.bound.values(), default=began)
        figures = {"post_pods_per_s": rate(len(posted), answered - began),
                   "seen_pods_per_s": rate(len(log.bound), seen - began),
                   "post_p50_ms": latency_figures([s * 1000 for s in posted])["p50_ms"],
                   "post_p99_ms": latency_figures([s * 1000 for s in posted])["p99_ms"]}
        return _record(kind, name, arena, plans, log.bound, figures, measured, in_flight=BIND_PARALLEL)
    finally:
        await close_arena(bench, arena)


async def steady(bench: Bench, scheduler: str, pods_per_s: float, duration_s: float) -> dict[str, Any]:
    """`scheduler` up and ready; pods arrive open loop at `pods_per_s` for `duration_s`: create → bound."""
    plans = pod_mix(max(1, int(round(pods_per_s * duration_s))), "s")
    flavour: Flavour = "shoal" if scheduler == contenders.SHOAL else "plain"
    arena = await open_arena(bench, plans)
    running: contenders.Running | None = None
    try:
        if flavour == "shoal":  # the gangs' PodGroups exist before their pods arrive
            await create_groups(bench, arena, plans)
        watcher = Watcher(bench, arena)
        async with watcher as log:
            running = await asyncio.to_thread(contenders.start, scheduler, bench.state_dir, bench.info,
                                              tag=arena.tag, pool=arena.pool)
            meter = Meter(bench, running)
            created = await arrive(bench, arena, plans, flavour, pods_per_s)
            await log.wait_for({p.name for p in plans}, bench.timeout_s)
            settled = await groups_settled(log, plans, flavour, bench.timeout_s)
            measured = meter.end(watcher.pid)
        starts = sorted(created.values())
        latencies = {n: (log.bound[n] - t) * 1000 for n, t in created.items() if n in log.bound}
        figures = {"achieved_rate": rate(len(starts) - 1, starts[-1] - starts[0]) if len(starts) > 1 else 0.0,
                   **latency_figures(list(latencies.values())), **figures_by_kind(plans, latencies),
                   # kube-scheduler binds gang members alone: its ready → bound is its create → bound
                   **ready_figures(list((ready_latencies(plans, created, log.bound) if flavour == "shoal"
                                         else latencies).values())), **settled}
        return _record("steady", scheduler, arena, plans, log.bound, figures, measured, rate=pods_per_s,
                       duration_s=duration_s, startup_s=round(running.ready_at - running.launched_at, 3))
    finally:
        if running is not None:
            contenders.stop(bench.state_dir, running)
            bench.leftovers += [f"process {n}" for n in running.alive()]
        await close_arena(bench, arena)


async def arrive(bench: Bench, arena: Arena, plans: list[PodPlan], flavour: Flavour,
                 pods_per_s: float) -> dict[str, float]:
    """Open loop: pod i is posted at start + i / rate whatever happened to the earlier ones; returns when
    each create was sent (time.monotonic())."""
    created: dict[str, float] = {}
    tasks = []
    began = time.monotonic()

    async def one(plan: PodPlan) -> None:
        created[plan.name] = time.monotonic()
        await bench.kube.create(k.PODS, pod_manifest(plan, arena.namespace, arena.pool, flavour),
                                namespace=arena.namespace)

    for i, plan in enumerate(plans):
        delay = began + i / pods_per_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(plan)))
    await asyncio.gather(*tasks)
    return created

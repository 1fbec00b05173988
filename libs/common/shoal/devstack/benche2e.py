"""End-to-end scheduling benchmark on the real stack (SPEC §6): pods bound per second and create→bound
latency p50/p99 for Shoal's services, side by side with upstream kube-scheduler (same Kubernetes version,
same apiserver, same fake nodes), and the apiserver's own bind rate (pods/binding posted directly), which is
the physical limit on this machine. Each run reports ratios measured in that run, never absolute thresholds.

Shoal runs twice: `shoal` with bare pods (the podgrouper makes each pod's PodGroup, as in KAI) and
`shoal-pregrouped` with PodGroups made before the clock starts (pods name theirs), which separates the
podgrouper's cost from the rest of the path. Each Shoal phase also reports the CPU seconds every service
used during it (from /proc), a figure that stays comparable on a busy machine where wall-clock ones do not.

    result = await run(stack_info, pods=200, nodes=25)
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from shoal.adapters import kube as k
from shoal.adapters.kube_watch import ListWatch
from shoal.devstack.paths import k8s_bin
from shoal.devstack.procs import ProcessSpec, free_port, launch, port_open, stop_process, wait_ready

SHOAL_SERVICES = ("podgrouper", "snapshotter", "fairshare", "planner", "binder")  # pods get PodGroups as in KAI


@dataclass
class Phase:
    name: str
    pods: int
    seconds: float
    pods_per_second: float
    p50_ms: float
    p99_ms: float
    cpu_s: dict[str, float] | None = None  # Shoal phases: CPU seconds per service during the phase


def _pod(namespace: str, name: str, pool: str, scheduler: str, pod_group: str | None = None) -> dict:
    annotations = {"pod-group-name": pod_group} if pod_group else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations,
                         "labels": {"kai.scheduler/node-pool": pool, "kai.scheduler/queue": namespace}},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {"kai.scheduler/node-pool": pool},
                     "containers": [{"name": "c", "image": "busybox",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def _podgroup(namespace: str, name: str, queue: str) -> dict:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minMember": 1, "queue": queue, "priorityClassName": "train"}}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def _measure(kube: k.Kube, name: str, namespace: str, pool: str, scheduler: str, count: int,
                   parallel: int, timeout_s: float, bind_directly: list[str] | None = None,
                   grouped: bool = False, pids: dict[str, int] | None = None) -> Phase:
    """Create `count` pods as fast as `parallel` allows and time until each is seen bound. `grouped`: each pod
    names a PodGroup made before the clock starts; `pids`: the CPU seconds of these processes are reported."""
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    done = asyncio.Event()
    prefix = f"{name}-"
    if grouped:
        gate = asyncio.Semaphore(parallel)

        async def make_group(i: int) -> None:
            async with gate:
                await kube.create(k.PODGROUPS, _podgroup(namespace, f"{prefix}{i}", namespace), namespace=namespace)

        await asyncio.gather(*(make_group(i) for i in range(count)))

    async def watch() -> None:
        async for event in ListWatch(kube, k.PODS, namespace=namespace, timeout_s=60):
            objs = event.objects if event.type == "SYNCED" else [event.object or {}]
            now = time.monotonic()
            for obj in objs:
                pod_name = obj.get("metadata", {}).get("name", "")
                if pod_name.startswith(prefix) and obj.get("spec", {}).get("nodeName") and pod_name not in bound:
                    bound[pod_name] = now
            if len(bound) >= count:
                done.set()
                return

    watcher = asyncio.create_task(watch())
    sem = asyncio.Semaphore(parallel)
    nodes = bind_directly or []

    async def one(i: int) -> None:
        pod_name = f"{prefix}{i}"
        async with sem:
            created[pod_name] = time.monotonic()
            await kube.create(k.PODS, _pod(namespace, pod_name, pool, scheduler, pod_name if grouped else None),
                              namespace=namespace)
            if nodes:
                body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod_name, "namespace": namespace},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[i % len(nodes)]}}
                await kube.create(k.PODS, body, namespace=namespace, name=pod_name, subresource="binding")

    cpu_before = {service: _cpu_seconds(pid) for service, pid in (pids or {}).items()}
    began = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(count)))
    try:
        await asyncio.wait_for(done.wait(), timeout=timeout_s)
    finally:
        watcher.cancel()
    cpu = {service: round(_cpu_seconds(pid) - cpu_before[service], 2) for service, pid in (pids or {}).items()}
    latencies = [(bound[p] - created[p]) * 1000 for p in bound if p in created]
    last = max(bound.values())
    seconds = last - began
    return Phase(name=name, pods=count, seconds=round(seconds, 3), pods_per_second=round(count / seconds, 1),
                 p50_ms=round(statistics.median(latencies), 1), p99_ms=round(_percentile(latencies, 0.99), 1),
                 cpu_s=cpu or None)


def _kube_scheduler_spec(kubeconfig: str) -> ProcessSpec:
    port = free_port()
    argv = [str(k8s_bin("kube-scheduler")), f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={port}", "-v=1"]
    return ProcessSpec(name="kube-scheduler", argv=argv, ready=lambda: port_open(port), ready_timeout_s=60)


async def run(info, *, pods: int = 200, nodes: int = 25, gpus: int = 8, parallel: int = 16,  # type: ignore[no-untyped-def]
              timeout_s: float = 300.0) -> dict:
    from kubernetes_asyncio import client, config

    from shoal.devstack.nodes import create_gpu_nodes, delete_nodes
    from shoal.devstack.scheduler import install_base, service_spec

    tag = f"bench{uuid.uuid4().hex[:6]}"
    state = Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    await install_base(info.kubeconfig)
    cfg = client.Configuration()
    await config.load_kube_config(config_file=info.kubeconfig, client_configuration=cfg)
    api = client.ApiClient(cfg)
    kube = k.Kube(api)
    pools = {phase: f"{tag}-{phase}" for phase in ("raw", "kube", "shoal", "shoalpg")}
    made: list[str] = []
    started: list[str] = []
    namespace = tag
    try:
        await kube.create(k.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
        await kube.create(k.QUEUES, {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                                     "metadata": {"name": namespace},
                                     "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}})
        per_pool = {}
        for phase, pool in pools.items():
            names = [f"{pool}-n{i}" for i in range(nodes)]
            made += await create_gpu_nodes(api, names, gpus=gpus, pool=pool, labels={"shoal.io/isolated": tag})
            per_pool[phase] = names
        raw = await _measure(kube, "raw", namespace, pools["raw"], "no-scheduler", pods, parallel, timeout_s,
                             bind_directly=per_pool["raw"])
        spec = _kube_scheduler_spec(info.kubeconfig)
        pid = launch(state, spec)
        started.append(spec.name)
        wait_ready(state, spec, pid)
        upstream = await _measure(kube, "kube-scheduler", namespace, pools["kube"], "default-scheduler", pods,
                                  parallel, timeout_s)
        env = {**info.env(), "SHOAL_TOPIC_PREFIX": f"{tag}.", "SHOAL_SHARD_PREFIX": f"{tag}-shoal"}
        specs = [service_spec(name, env) for name in SHOAL_SERVICES]
        pids = {s.name: launch(state, s) for s in specs}
        started += list(pids)
        for s in specs:
            wait_ready(state, s, pids[s.name])
        shoal = await _measure(kube, "shoal", namespace, pools["shoal"], "shoal-scheduler", pods, parallel,
                               timeout_s, pids=pids)
        pregrouped = await _measure(kube, "shoal-pregrouped", namespace, pools["shoalpg"], "shoal-scheduler", pods,
                                    parallel, timeout_s, grouped=True, pids=pids)
    finally:
        for name in started:
            stop_process(state, name)
        await delete_nodes(api, made)
        for resource in (k.NAMESPACES, k.QUEUES):
            try:
                await kube.delete(resource, namespace)
            except Exception:  # noqa: BLE001 - best effort cleanup
                pass
        await api.close()
    return {"pods": pods, "nodes": nodes, "gpus_per_node": gpus, "parallel_creates": parallel,
            "phases": [asdict(raw), asdict(upstream), asdict(shoal), asdict(pregrouped)],
            "ratios": {"shoal_vs_kube_scheduler_throughput": round(shoal.pods_per_second / upstream.pods_per_second, 3),
                       "shoal_vs_apiserver_bind_limit": round(shoal.pods_per_second / raw.pods_per_second, 3),
                       "shoal_vs_kube_scheduler_p50": round(shoal.p50_ms / max(upstream.p50_ms, 0.001), 3),
                       "shoal_vs_kube_scheduler_p99": round(shoal.p99_ms / max(upstream.p99_ms, 0.001), 3),
                       "shoal_pregrouped_vs_kube_scheduler_throughput":
                           round(pregrouped.pods_per_second / upstream.pods_per_second, 3),
                       "shoal_pregrouped_vs_apiserver_bind_limit":
                           round(pregrouped.pods_per_second / raw.pods_per_second, 3)}}


def table(result: dict) -> str:
    rows = [f"{'phase':<16}{'pods':>6}{'seconds':>10}{'pods/s':>10}{'p50 ms':>10}{'p99 ms':>10}"]
    for p in result["phases"]:
        rows.append(f"{p['name']:<16}{p['pods']:>6}{p['seconds']:>10}{p['pods_per_second']:>10}"
                    f"{p['p50_ms']:>10}{p['p99_ms']:>10}")
    for p in result["phases"]:
        if p.get("cpu_s"):
            rows.append(f"cpu seconds during {p['name']}: "
                        + ", ".join(f"{service}={cpu}" for service, cpu in p["cpu_s"].items()))
    rows.append("ratios: " + ", ".join(f"{k}={v}" for k, v in result["ratios"].items()))
    return "\n".join(rows)

"""`shoal bench core`: time the scheduling core on generated clusters (SPEC §6).

Clusters of 100 / 1,000 / 4,000 nodes x 8 GPUs with 2k / 20k / 140k pods: most running (whole-GPU pods,
shared GPUs with fractional pods, CPU-only pods), a few hundred pending (gangs, single GPU pods,
fractions, CPU pods), two departments of four projects under `root`. The generator is seeded, so a size
always gives the same cluster. `--files` benches manifest files instead (the shared generator's clusters).
Prints snapshot-build ms, per-action ms and total per cluster, and per eviction action its evictions,
pipelined pods, evictions per pipelined pod, victim-search counters and unneeded evictions
(bench_report.py).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

from shoal.cli.bench_report import load_snapshot, measure, table
from shoal.cli.bench_soak import add_arguments as add_soak_arguments
from shoal.cli.manifests import ManifestError
from shoal.core.builders import PRIORITY_CLASSES, group, node, pod_of, queue
from shoal.core.model import (
    FractionRequest,
    Node,
    Pod,
    PodGroup,
    Queue,
    ShardConfig,
    Snapshot,
    make_snapshot,
)

SIZES = {100: 2_000, 1_000: 20_000, 4_000: 140_000}
GI = 1024**3
NS = "bench"
CLASSES = tuple(c for c in PRIORITY_CLASSES if c.name != "build-preemptible")  # train 50, build 100, inference 125


def _queues() -> list[Queue]:
    """root > dept0..1 > proj<d>0..3 (quota 50, 60, 70, 80 GPUs, weight 1..4); everything else unlimited."""
    out = [queue("root", parent=None)]
    for d in range(2):
        out.append(queue(f"dept{d}", created=d))
        out += [queue(f"proj{d}{p}", parent=f"dept{d}", created=10 + p, gpu=(50 + 10 * p, -1, 1 + p))
                for p in range(4)]
    return out


def bench_group(name: str, queue: str, min_member: int = 1, cls: str = "train", created: int = 0) -> PodGroup:
    """A PodGroup of the generated clusters (namespace `bench`, uid `u-<name>`)."""
    return group(name, queue, namespace=NS, uid=f"u-{name}", min_member=min_member, priority_class=cls,
                 created=created)


def bench_pod(name: str, pod_group: str, **fields: Any) -> Pod:
    """A pod of the generated clusters (namespace `bench`, uid `u-<name>`) in PodGroup `pod_group`."""
    return pod_of(name, pod_group, namespace=NS, uid=f"u-{name}", **fields)


def bench_node(name: str, **fields: Any) -> Node:
    """A node of the generated clusters: 8 GPUs of 80 GiB, 128 cores, 1 TiB, 110 pods."""
    return node(name, gpus=8, cpu=128_000, memory=1024 * GI, pods=110, gpu_memory=81920, **fields)


def generate(nodes: int, pods: int, seed: int = 7, pending: int = 300) -> Snapshot:
    """A deterministic cluster of `nodes` x 8 GPUs holding about `pods` pods."""
    rng = random.Random(seed * 1_000_003 + nodes)
    leaves = [f"proj{d}{p}" for d in range(2) for p in range(4)]
    node_list, jobs = [], []
    per_node = max(1, (pods - pending) // nodes)
    for i in range(nodes):
        node = bench_node(f"node-{i:05d}", labels={"pool": "a" if i % 2 else "b"})
        node_list.append(node)
        jobs.extend(_running(rng, i, node.name, per_node, leaves))
    jobs.extend(_pending(rng, pending, leaves))
    return make_snapshot(nodes=node_list, pods=[pod for _, members in jobs for pod in members],
                         pod_groups=[group for group, _ in jobs], queues=_queues(), priority_classes=CLASSES,
                         config=ShardConfig(), now=1_800_000_000, revision=1)


Job = tuple[PodGroup, list[Pod]]


def _running(rng: random.Random, i: int, node: str, per_node: int, leaves: list[str]) -> list[Job]:
    """Node i's running pods, each its own PodGroup: whole-GPU pods leaving a GPU free, then (60 %) one shared
    GPU with one to three quarter-GPU fractions, then CPU-only services up to `per_node` pods."""
    jobs: list[Job] = []
    running = {"node_name": node, "phase": "Running", "created": i}
    free = 8
    while free > 1 and len(jobs) < per_node:
        g = min(free - 1, rng.choice((1, 1, 2, 4)))
        name = f"w-{i}-{len(jobs)}"
        jobs.append((bench_group(name, rng.choice(leaves)),
                     [bench_pod(name, name, gpus=g, cpu_milli=4000, memory_bytes=32 * GI,
                                deleting=rng.random() < 0.01, **running)]))
        free -= g
    if rng.random() < 0.6 and len(jobs) < per_node:  # one shared GPU with fractions
        for k in range(rng.choice((1, 2, 3))):
            name = f"f-{i}-{k}"
            jobs.append((bench_group(name, rng.choice(leaves)),
                         [bench_pod(name, name, fraction=FractionRequest(portion_milli=250), cpu_milli=1000,
                                    gpu_groups=(f"grp-{i}",), **running)]))
    while len(jobs) < per_node:  # CPU-only services
        name = f"c-{i}-{len(jobs)}"
        jobs.append((bench_group(name, rng.choice(leaves), cls="inference"),
                     [bench_pod(name, name, cpu_milli=200, memory_bytes=GI, **running)]))
    return jobs


def _pending(rng: random.Random, pending: int, leaves: list[str]) -> list[Job]:
    """About `pending` pending pods: 30 % gangs of 2, 4 or 8 (the first member 1, 2 or 4 GPUs, the rest one),
    30 % one- or two-GPU pods, 25 % quarter or half GPU fractions, the rest CPU-only."""
    jobs: list[Job] = []
    made = 0
    while made < pending:
        j = len(jobs)
        kind = rng.random()
        q = rng.choice(leaves)
        fields: dict[str, Any]
        if kind < 0.3:  # gang
            size = rng.choice((2, 4, 8))
            name = f"gang-{j}"
            jobs.append((bench_group(name, q, min_member=size, created=100_000 + j),
                         [bench_pod(f"{name}-{k}", name, gpus=rng.choice((1, 2, 4)) if k == 0 else 1,
                                    cpu_milli=2000, created=k) for k in range(size)]))
            made += size
            continue
        if kind < 0.6:
            name, fields = f"one-{j}", {"gpus": rng.choice((1, 2)), "cpu_milli": 1000}
        elif kind < 0.85:
            name, fields = f"frac-{j}", {"fraction": FractionRequest(portion_milli=rng.choice((250, 500)))}
        else:
            name, fields = f"cpu-{j}", {"cpu_milli": 500, "memory_bytes": GI}
        jobs.append((bench_group(name, q, created=100_000 + j), [bench_pod(name, name, created=j, **fields)]))
        made += 1
    return jobs


def bench_one(nodes: int, pods: int, repeat: int, seed: int, clock=time.perf_counter) -> dict:
    return measure(f"gen-{nodes}", generate(nodes, pods, seed), repeat, clock)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="benchmarks (core cycle time on generated clusters)")
    parser.add_argument("target", choices=["core", "reclaim", "e2e", "snapshot", "soak"],
                        help="what to benchmark (reclaim: shoal.cli.bench_reclaim, sizes default 500,1000; "
                             "e2e: the running stack from $SHOAL_KUBECONFIG…, Shoal vs kube-scheduler; "
                             "snapshot: --files through the snapshotter's translation, Redis and Kafka to the "
                             "planner service, no apiserver; soak: churn with faults on the running stack, "
                             "then invariant checks, shoal.cli.bench_soak)")
    parser.add_argument("--churn", type=int, default=10,
                        help="snapshot: pods bound, pods gone and pods created between two cycles, each")
    parser.add_argument("--pods", type=int, default=1000,
                        help="e2e: backlog pods per phase (1000 or 5000 for the published table; any size works)")
    parser.add_argument("--nodes", type=int, default=0,
                        help="e2e: fake nodes per phase, 8 GPUs each (0: sized so the whole mix fits)")
    parser.add_argument("--rates", default="10,50", help="e2e: steady-arrival rates, pods/s, comma-separated")
    parser.add_argument("--duration", type=float, default=60.0,
                        help="e2e: seconds of each steady-arrival phase (60 or more for published figures)")
    parser.add_argument("--schedulers", default="shoal,kube-scheduler,kube-scheduler-qps5000",
                        help="e2e: which schedulers to compare, comma-separated")
    parser.add_argument("--timeout", type=float, default=300.0, help="e2e: seconds a phase may wait for binds")
    parser.add_argument("--no-bind-ceiling", action="store_true", help="e2e: skip the apiserver's limit phases (bindings alone; KAI's writes)")
    parser.add_argument(
        "--sizes",
        default="100,1000,4000",
        help="comma-separated node counts out of 100,1000,4000 (pods: 2k/20k/140k)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="cycles per size (best and median reported)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--files", nargs="+", metavar="FILE",
                        help="core: bench these manifest files (e.g. ../shared/tools/gen_cluster.py --format json "
                             "clusters) instead of the generated sizes")
    parser.add_argument("--now", default="2026-01-01T00:00:00Z", help="core --files: the cycle's time (RFC3339)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_soak_arguments(parser)
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall: time.perf_counter; cpu: this process's CPU time (steadier on a busy machine)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.target == "e2e":
        return _run_e2e(args)
    if args.target == "snapshot":
        return _run_snapshot(args)
    if args.target == "soak":
        from shoal.cli.bench_soak import run_soak

        return run_soak(args)
    if args.target == "reclaim":  # core II: the reclaim benchmark lives in its own module
        from shoal.cli.bench_reclaim import run_reclaim

        return run_reclaim(args)
    clock = time.process_time if getattr(args, "clock", "wall") == "cpu" else time.perf_counter
    if args.files:
        rows = []
        for path in args.files:
            try:
                snap = load_snapshot(path, args.now)
            except ManifestError as exc:
                print(f"--files: {exc.one_line()}", file=sys.stderr)
                return 2
            except (ValueError, OSError) as exc:
                print(f"--files: {exc}", file=sys.stderr)
                return 2
            rows.append(measure(path.rsplit("/", 1)[-1], snap, max(1, args.repeat), clock))
    else:
        try:
            sizes = [int(s) for s in str(args.sizes).split(",") if s.strip()]
        except ValueError:
            print(f"--sizes: not a list of integers: {args.sizes}", file=sys.stderr)
            return 2
        bad = [s for s in sizes if s not in SIZES]
        if bad:
            print(f"--sizes: unknown size(s) {bad}; choose from {sorted(SIZES)}", file=sys.stderr)
            return 2
        rows = [bench_one(n, SIZES[n], max(1, args.repeat), args.seed, clock) for n in sizes]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    sys.stdout.write(table(rows))
    return 0


def _run_snapshot(args: argparse.Namespace) -> int:
    """--files through typed snapshots to the planner; on the running stack's Redis/Kafka when exported."""
    import asyncio

    from shoal.devstack import DevStackError, StackInfo
    from shoal.devstack.benchsnapshot import run as run_snapshot
    from shoal.devstack.benchsnapshot import table as snapshot_table

    if not args.files:
        print("shoal bench snapshot: --files is required (e.g. a ../shared/tools/gen_cluster.py cluster)",
              file=sys.stderr)
        return 2
    try:
        info = StackInfo.from_env()
        results = [asyncio.run(run_snapshot([path], churn=max(1, args.churn), rounds=max(1, args.repeat),
                                            redis_url=info.redis_url if info else "",
                                            bootstrap=info.kafka_bootstrap if info else ""))
                   for path in args.files]
    except ManifestError as exc:
        print(f"shoal bench snapshot: {exc.one_line()}", file=sys.stderr)
        return 2
    except (DevStackError, OSError) as exc:
        print(f"shoal bench snapshot: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(results, indent=2) if args.json else "\n".join(snapshot_table(r) for r in results))
    return 0


def _run_e2e(args: argparse.Namespace) -> int:
    """End to end on a running stack (`shoal dev up`, then export its SHOAL_* variables); --repeat repetitions."""
    import asyncio

    from shoal.devstack import DevStackError, StackInfo
    from shoal.devstack.benche2e import SCHEDULERS, table
    from shoal.devstack.benche2e import run as run_e2e

    try:
        rates = [float(r) for r in str(args.rates).split(",") if r.strip()]
    except ValueError:
        print(f"--rates: not a list of numbers: {args.rates}", file=sys.stderr)
        return 2
    schedulers = [s.strip() for s in str(args.schedulers).split(",") if s.strip()]
    problems = [f"--schedulers: unknown {s!r} (choose from {', '.join(SCHEDULERS)})"
                for s in schedulers if s not in SCHEDULERS]
    problems += ["--rates: every rate must be above 0"] if any(r <= 0 for r in rates) else []
    problems += ["--pods: must be at least 1"] if args.pods < 1 else []
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    if args.duration < 60:
        print(f"shoal bench e2e: --duration {args.duration:g} is below the method's 60 s: not for publication",
              file=sys.stderr)
    try:
        info = StackInfo.from_env()
    except DevStackError as exc:
        print(f"shoal bench e2e: {exc}", file=sys.stderr)
        return 1
    if info is None:
        print("shoal bench e2e: no stack: run `shoal dev up` and export the SHOAL_* variables it prints",
              file=sys.stderr)
        return 1

    def progress(record: dict) -> None:
        figures = ", ".join(f"{k}={v}" for k, v in record["figures"].items())
        print(f"[{record['repetition']}] {record['kind']} {record['scheduler']}"
              f"{' @' + str(record.get('rate')) if record.get('rate') else ''}: {record['bound']}/{record['pods']} "
              f"bound; {figures}; load {record['load_before'][0]}", file=sys.stderr, flush=True)

    result = asyncio.run(run_e2e(info, pods=args.pods, rates=rates, duration_s=args.duration,
                                 repeat=max(1, args.repeat), schedulers=schedulers, nodes=args.nodes,
                                 timeout_s=args.timeout, bind_ceiling=not args.no_bind_ceiling, progress=progress))
    print(json.dumps(result, indent=2) if args.json else table(result), end="" if not args.json else "\n")
    return 0 if not result["leftovers"] and all(r["bound"] == r["pods"] for r in result["records"]) else 1

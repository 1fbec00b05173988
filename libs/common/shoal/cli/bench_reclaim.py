"""`shoal bench reclaim`: time the reclaim action on generated full clusters (SPEC §6: 500 and 1,000 nodes).

The cluster: N nodes x 8 GPUs, every GPU held by queue `hog` (quota 0, so everything it runs is over
quota and preemptible `train` work: 1-, 2- and 4-GPU pods, elastic jobs and gangs, random start order).
Queue `starved` (quota = half the cluster) has pending work: 8-pod 1-GPU gangs, 4-GPU single pods and
elastic 1-GPU jobs, about `--pending` pods in all. One full cycle runs (all actions); reclaim has to pick
victims newest first, leveled queues, fair share and the saturation bound, and place the reclaimers.
The generator is seeded, so a size always gives the same cluster. Reports reclaim ms, total ms,
evictions, pipelined pods and the solver's counters.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from shoal.cli.bench import bench_group, bench_node, bench_pod
from shoal.core.builders import queue
from shoal.core.cycle import run_cycle_timed
from shoal.core.model import (
    PriorityClass,
    ShardConfig,
    Snapshot,
    make_snapshot,
)
from shoal.core.plan import Evict, Pipeline

DEFAULT_SIZES = (500, 1000)
GI = 1024**3
CLASSES = (PriorityClass(name="train", value=50), PriorityClass(name="build", value=100))


def generate(nodes: int, seed: int = 7, pending: int = 400) -> Snapshot:
    rng = random.Random(seed * 7919 + nodes)
    # root > hog (quota 0) and starved (quota half the GPUs); everything else unlimited
    queues = [queue("root", parent=None), queue("hog", gpu=(0, -1)), queue("starved", gpu=(nodes * 4, -1), created=1)]
    node_list, pods, groups = [], [], []
    started = list(range(nodes * 8))
    rng.shuffle(started)
    stamp = iter(started)
    for i in range(nodes):
        name = f"node-{i:05d}"
        node_list.append(bench_node(name))
        free, k = 8, 0
        while free > 0:
            g = min(free, rng.choice((1, 1, 1, 2, 4)))
            created = next(stamp)
            pg = f"h-{i}-{k}"
            groups.append(bench_group(pg, "hog", created=created))
            pods.append(bench_pod(f"{pg}-0", pg, gpus=g, cpu_milli=2000, memory_bytes=8 * GI, node_name=name,
                                  phase="Running", created=created))
            free -= g
            k += 1
    made, j = 0, 0
    while made < pending:
        kind = j % 3
        pg = f"s-{j}"
        # 8-pod gang of 1-GPU pods; one 4-GPU pod (needs half a node); elastic: 4 pods, minimum 1
        size, min_member, gpus = ((8, 8, 1), (1, 1, 4), (4, 1, 1))[kind]
        groups.append(bench_group(pg, "starved", min_member=min_member, created=10_000_000 + j))
        pods.extend(bench_pod(f"{pg}-{p}", pg, gpus=gpus, cpu_milli=1000, created=p) for p in range(size))
        made += size
        j += 1
    return make_snapshot(nodes=node_list, pods=pods, pod_groups=groups, queues=queues, priority_classes=CLASSES,
                         config=ShardConfig(), now=1_800_000_000, revision=1)


def bench_one(nodes: int, repeat: int, seed: int, pending: int, clock=time.perf_counter) -> dict:
    snap = generate(nodes, seed, pending)
    runs = []
    plan = None
    for _ in range(repeat):
        plan, t = run_cycle_timed(snap, clock)
        runs.append(t)
    best = min(runs, key=lambda t: t.action_durations_ms.get("reclaim", 0.0))
    return {
        "nodes": nodes,
        "pods": len(snap.pods),
        "pending": sum(1 for p in snap.pods if p.node_name is None),
        "reclaim_ms": best.action_durations_ms.get("reclaim", 0.0),
        "median_reclaim_ms": round(statistics.median(t.action_durations_ms.get("reclaim", 0.0) for t in runs), 3),
        "total_duration_ms": best.total_duration_ms,
        "action_durations_ms": best.action_durations_ms,
        "evictions": len(plan.of(Evict)) if plan else 0,
        "pipelined": len(plan.of(Pipeline)) if plan else 0,
        "counters": best.counters,
    }


def run_reclaim(args: argparse.Namespace) -> int:
    raw = str(getattr(args, "sizes", "") or "")
    try:
        sizes = [int(s) for s in raw.split(",") if s.strip()] if raw and raw != "100,1000,4000" else list(DEFAULT_SIZES)
    except ValueError:
        print(f"--sizes: not a list of integers: {raw}", file=sys.stderr)
        return 2
    if any(s <= 0 for s in sizes):
        print("--sizes: node counts must be positive", file=sys.stderr)
        return 2
    pending = int(getattr(args, "pending", 400) or 400)
    clock = time.process_time if getattr(args, "clock", "wall") == "cpu" else time.perf_counter
    rows = [bench_one(n, max(1, args.repeat), args.seed, pending, clock) for n in sizes]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'nodes':>6} {'pods':>7} {'pending':>7} {'reclaim ms':>10} {'median':>9} {'cycle ms':>9} "
          f"{'evicted':>7} {'pipelined':>9} {'victims simulated':>17}")
    for r in rows:
        print(f"{r['nodes']:>6} {r['pods']:>7} {r['pending']:>7} {r['reclaim_ms']:>10.1f} {r['median_reclaim_ms']:>9.1f} "
              f"{r['total_duration_ms']:>9.1f} {r['evictions']:>7} {r['pipelined']:>9} "
              f"{r['counters'].get('reclaim.victims_simulated', 0):>17}")
    return 0

"""The service path without an apiserver: a generated cluster through the snapshotter's translation, Redis and
Kafka to the planner service, timed (SPEC §6: announcement → plan published under 1 s at 4,000 nodes).

The bench plays the snapshotter in this process (the same `Shards` and `SnapshotWriter` it runs) and starts the
real planner service as its own process on a Redis and Kafka (the running stack's, or its own). It stores the
cluster as a base and announces it (a planner's first cycle: the base read); then, each round, it changes
`churn` pods of each kind a cluster sees between two cycles (pending pods bound, running pods gone, new pods
with their PodGroups), stores the delta, announces it and waits for the plan of that revision on the plans
topic. Reported: translation CPU per object and per changed object (what the snapshotter pays per watch
event), bytes of the base and of each delta, announcement → plan published, and the planner's CPU per cycle.

    result = await run(["c4000.json"], churn=10, rounds=5)
"""

from __future__ import annotations

import asyncio
import copy
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from shoal.adapters import redis_keys
from shoal.adapters.kafka import Consumer, Delivery, Publisher, ensure_topics
from shoal.adapters.redis_client import connect_redis
from shoal.adapters.shard_snapshots import SnapshotWriter
from shoal.core.fields import mapping
from shoal.devstack import components
from shoal.devstack.bench_contenders import cpu_seconds
from shoal.devstack.errors import DevStackError
from shoal.devstack.procs import ProcessSpec, free_port, launch, stop_process, wait_ready
from shoal.messages import topics
from shoal.messages.base import new_meta
from shoal.messages.plan import PlanIssued
from shoal.messages.snapshot import SnapshotPublished
from shoal.settings import KafkaSettings, RedisSettings

SCHEDULER = "shoal-scheduler"
WATCHED = ("Node", "Pod", "PodGroup", "Queue", "PriorityClass", "Topology", "PodDisruptionBudget")


def start_bus(state: Path) -> tuple[str, str, list[str]]:
    """Redis and a one-node Kafka under `state`: (redis url, bootstrap, names to stop)."""
    redis_port, kafka_port = free_port(), free_port()
    redis_spec = components.redis(state, redis_port)
    kafka_spec, kafka_format = components.kafka(state, kafka_port, free_port())
    done = subprocess.run(kafka_format, capture_output=True, timeout=120, check=False)
    if done.returncode != 0:
        raise DevStackError(f"kafka storage format failed: {done.stdout.decode()[-300:]}")
    started = []
    for spec in (redis_spec, kafka_spec):
        pid = launch(state, spec, tie_to_parent=True)
        started.append(spec.name)
        wait_ready(state, spec, pid)
    return f"redis://127.0.0.1:{redis_port}/0", f"127.0.0.1:{kafka_port}", started


def churn_round(objects: dict[str, dict], nodes: list[str], count: int, serial: int) -> list[tuple[dict, bool]]:
    """What a cluster does between two cycles: `count` pending pods bound, `count` running pods gone and
    `count` new pending pods (with their PodGroups). (object, deleted) pairs, in watch-event order."""
    pods = [o for o in objects.values() if o["kind"] == "Pod"]
    pending = sorted((o for o in pods if not o["spec"].get("nodeName")), key=lambda o: o["metadata"]["name"])
    running = sorted((o for o in pods if o["spec"].get("nodeName")), key=lambda o: o["metadata"]["name"])
    events: list[tuple[dict, bool]] = []
    for i, pod in enumerate(pending[:count]):
        bound = copy.deepcopy(pod)
        bound["spec"]["nodeName"] = nodes[(serial * count + i) % len(nodes)]
        events.append((bound, False))
    events += [(pod, True) for pod in running[:count]]
    template = pending[0] if pending else running[0]
    groups = {f"{o['metadata'].get('namespace')}/{o['metadata']['name']}": o
              for o in objects.values() if o["kind"] == "PodGroup"}
    group_of = mapping(template, "metadata", "annotations").get("pod-group-name")
    group = groups.get(f"{template['metadata'].get('namespace')}/{group_of}")
    for i in range(count):
        name = f"bench-{serial}-{i}"
        if group is not None:
            new_group = copy.deepcopy(group)
            new_group["metadata"].update(name=f"pg-{name}", uid=str(uuid.uuid4()))
            events.append((new_group, False))
        pod = copy.deepcopy(template)
        pod["metadata"].update(name=name, uid=str(uuid.uuid4()))
        pod["metadata"].setdefault("annotations", {})["pod-group-name"] = f"pg-{name}"
        pod["spec"].pop("nodeName", None)
        pod["status"] = {"phase": "Pending"}
        events.append((pod, False))
    return events


def _key(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']}/{meta.get('namespace', '')}/{meta['name']}"


async def run(files: list[str], *, churn: int = 10, rounds: int = 5, redis_url: str = "",  # noqa: PLR0915
              bootstrap: str = "", timeout_s: float = 120.0) -> dict:
    from services.snapshotter.translate import Shards
    from shoal.cli.manifests import load_documents
    from shoal.devstack.scheduler import service_spec

    docs, _ = load_documents(files)
    objects = {_key(o): o for o in docs if isinstance(o, dict) and o.get("kind") in WATCHED}
    for obj in objects.values():
        obj["metadata"].setdefault("uid", str(uuid.uuid4()))
    state = Path(tempfile.mkdtemp(prefix="shoal-bench-snapshot-"))
    started: list[str] = []
    if not (redis_url and bootstrap):
        redis_url, bootstrap, started = start_bus(state)
    prefix = f"benchsnap{uuid.uuid4().hex[:6]}."
    kafka = KafkaSettings(bootstrap=bootstrap)
    redis = connect_redis(RedisSettings(url=redis_url))
    plans: dict[int, float] = {}
    ops: dict[int, dict[str, int]] = {}  # revision → plan operations by kind
    arrived = asyncio.Event()

    async def on_plan(plan: PlanIssued, delivery: Delivery) -> None:
        plans.setdefault(plan.revision, time.perf_counter())
        counts: dict[str, int] = {}
        for op in plan.ops:
            counts[type(op).__name__] = counts.get(type(op).__name__, 0) + 1
        ops.setdefault(plan.revision, counts)
        arrived.set()

    announced = topics.SNAPSHOTS.full(prefix)
    await ensure_topics(kafka, [announced, topics.PLANS.full(prefix), topics.DECISIONS.full(prefix)])
    consumer = Consumer(kafka, [topics.PLANS.full(prefix)], group_id=f"{prefix}bench", message_type=PlanIssued,
                        handler=on_plan)
    rows: list[dict] = []
    try:
        shards = Shards(SCHEDULER, now=lambda: "2026-01-01T00:00:00Z")
        cpu = time.process_time()
        for obj in objects.values():
            shards.update(obj)
        translate_s = time.process_time() - cpu
        shard = shards.active()[0]
        shards.take(shard)
        writer = SnapshotWriter(redis)
        revision = (await writer.latest_revision(shard) or 0) + 1  # a shared Redis may hold earlier runs
        await redis.delete(redis_keys.inflight(shard))  # and their binds in flight (same pod uids)
        began = time.perf_counter()
        stored = await writer.publish_base(shard, revision, shards.model(shard).entries(),
                                           taken_at="2026-01-01T00:00:00Z", require_podgroup=True)
        if stored is None:
            raise DevStackError("the base was not stored (a newer revision exists)")
        chain, base_bytes = stored
        base_write_s = time.perf_counter() - began
        env = {**os.environ, "SHOAL_KAFKA_BOOTSTRAP": bootstrap, "SHOAL_REDIS_URL": redis_url,
               "SHOAL_TOPIC_PREFIX": prefix}
        spec: ProcessSpec = service_spec("planner", env)
        pid = launch(state, spec, tie_to_parent=True)
        started.append(spec.name)
        wait_ready(state, spec, pid)
        async with consumer, Publisher(kafka) as bus:
            runner = asyncio.create_task(consumer.run())
            nodes = sorted(shards.model(shard).nodes)

            async def cycle(revision: int) -> tuple[float, float]:
                arrived.clear()
                cpu_before = cpu_seconds(pid)
                sent = time.perf_counter()
                message = SnapshotPublished(meta=new_meta("bench", revision=revision), shard=shard, revision=revision)
                await bus.publish(announced, message, key=shard)
                deadline = sent + timeout_s
                while revision not in plans:
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        raise DevStackError(f"no plan for revision {revision} within {timeout_s:.0f}s "
                                            f"(planner log: {state / 'logs' / 'planner.log'})")
                    try:
                        await asyncio.wait_for(arrived.wait(), timeout=left)
                    except TimeoutError:
                        continue
                    arrived.clear()
                return plans[revision] - sent, cpu_seconds(pid) - cpu_before

            first_s, first_cpu = await cycle(revision)
            for serial in range(rounds):
                events = churn_round(objects, nodes, churn, serial)
                cpu = time.process_time()
                for obj, deleted in events:
                    if deleted:
                        shards.remove(obj)
                    else:
                        shards.update(obj)
                per_event_us = (time.process_time() - cpu) / len(events) * 1e6
                for obj, deleted in events:
                    if deleted:
                        objects.pop(_key(obj), None)
                    else:
                        objects[_key(obj)] = obj
                revision += 1
                delta_bytes = await writer.publish_delta(shard, revision, shards.take(shard), chain=chain,
                                                         taken_at="2026-01-01T00:00:00Z", require_podgroup=True)
                if delta_bytes is None:
                    raise DevStackError(f"delta {revision} was not stored")
                seconds, planner_cpu = await cycle(revision)
                rows.append({"revision": revision, "events": len(events), "translate_us_per_event": per_event_us,
                             "delta_bytes": delta_bytes, "announce_to_plan_s": seconds, "planner_cpu_s": planner_cpu,
                             "plan_ops": ops.get(revision, {})})
            first_revision = revision - len(rows)
            runner.cancel()
    finally:
        for name in reversed(started):
            stop_process(state, name)
        await redis.aclose()
    model = shards.model(shard)
    pods = sum(1 for o in objects.values() if o["kind"] == "Pod")

    def median(name: str) -> float:
        return statistics.median(r[name] for r in rows) if rows else 0.0

    return {"files": files, "nodes": len(model.nodes), "pods": pods, "objects": len(objects), "churn": churn,
            "rounds": rows, "load_average": os.getloadavg(),
            "translate_all_cpu_s": round(translate_s, 3),
            "translate_us_per_object": round(translate_s / max(1, len(objects)) * 1e6, 1),
            "base_bytes": base_bytes, "base_write_s": round(base_write_s, 3),
            "first_announce_to_plan_s": round(first_s, 3), "first_planner_cpu_s": round(first_cpu, 2),
            "first_plan_ops": ops.get(first_revision, {}), "planner_log": str(state / "logs" / "planner.log"),
            "announce_to_plan_s_median": round(median("announce_to_plan_s"), 3),
            "planner_cpu_s_median": round(median("planner_cpu_s"), 2),
            "delta_bytes_median": int(median("delta_bytes")),
            "translate_us_per_event_median": round(median("translate_us_per_event"), 1)}


def table(result: dict) -> str:
    lines = [f"{', '.join(result['files'])}: {result['nodes']} nodes, {result['pods']} pods "
             f"(load average {', '.join(f'{v:.2f}' for v in result['load_average'])})",
             f"  translation: {result['translate_all_cpu_s']} s CPU for {result['objects']} objects "
             f"({result['translate_us_per_object']} µs each); per changed object {result['translate_us_per_event_median']} µs",
             f"  base: {result['base_bytes']:,} bytes, stored in {result['base_write_s']} s; "
             f"delta of {3 * result['churn']} pod changes: {result['delta_bytes_median']:,} bytes",
             f"  announcement → plan published: first (base read) {result['first_announce_to_plan_s']} s "
             f"({result['first_planner_cpu_s']} s planner CPU); after a delta, median "
             f"{result['announce_to_plan_s_median']} s ({result['planner_cpu_s_median']} s planner CPU)",
             f"  first plan: {result['first_plan_ops']}"]
    return "\n".join(lines)

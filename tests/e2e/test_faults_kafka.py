"""Fault tolerance: restart Kafka in the middle of a burst of 200 pods (gangs, whole-GPU pods, fractions).

Kafka is stopped by pid and started again on the same port with the same data (`restart_component`), while
the pods are still being created. Afterwards the invariants of `test_faults` hold (no node over-committed, no
gang partly bound, one reservation pod per shared GPU, every pending pod's group carries a condition) and
every service rode out the outage: the same process still runs and its /healthz answers.

Printed (`-s`): Kafka's stop-to-ready and start-to-ready seconds, the time from Kafka being ready again to the
next plan published, and to the burst settling.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from e2e_helpers import eventually
from test_faults import GPUS, NODES, SERVICES, OwnServices, check_invariants, create_many, quiescent, workload

from shoal.adapters.kube import PODGROUPS, PODS, QUEUES
from shoal.devstack.procs import alive, read_pid, wait_ready
from shoal.devstack.restart import component_spec, start_component, stop_component
from shoal.devstack.scheduler import install_base
from shoal.messages.topics import BIND_RESULTS, FAIRSHARE, PLANS, SNAPSHOTS, dlq

RESTART_AFTER_S = 2.0  # into the burst: pods are being created and plans issued
# the services' Kafka request timeout, and how long Kafka stays down at least: the outage outlasts every
# produce, fetch and commit request in flight, so timeouts (not only refused connections) reach the services
REQUEST_TIMEOUT_MS = 8000
HOLD_DOWN_S = 12.0


def healthz(port: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:  # noqa: S310 - loopback
        return resp.status


async def record_times(bootstrap: str, topic: str) -> list[float]:
    """CreateTime (epoch seconds) of every record on `topic` so far."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    out: list[float] = []
    try:
        idle = 0
        while idle < 2:
            batch = await consumer.getmany(timeout_ms=1000)
            idle = 0 if batch else idle + 1
            out += [r.timestamp / 1000 for records in batch.values() for r in records]
    finally:
        await consumer.stop()
    return sorted(out)


async def unsettled(kube, namespace) -> str:
    """What keeps the burst from settling: missing pods, pending pods whose group carries no condition."""
    items, _ = await kube.list(PODS, namespace=namespace)
    groups, _ = await kube.list(PODGROUPS, namespace=namespace)
    conditioned = {g["metadata"]["name"] for g in groups if (g.get("status") or {}).get("schedulingConditions")}
    pending = [p for p in items if not p["spec"].get("nodeName")]
    bare = [(p["metadata"]["name"], p["metadata"].get("labels"), p["metadata"].get("annotations"))
            for p in pending if p["metadata"]["annotations"]["pod-group-name"] not in conditioned]
    return f"pods {len(items)}, pending {len(pending)}, pending without a group condition: {bare[:5]}"


async def restart_kafka(state: Path, *, tie: bool, hold_down_s: float) -> dict[str, float]:
    """Stop Kafka (by pid) and start it on its port and data; the event loop keeps turning meanwhile.

    The launch runs on this (the main) thread, so a tied Kafka dies with pytest, not with a worker thread."""
    spec = component_spec(state, "kafka")
    stopping = time.monotonic()
    await asyncio.to_thread(stop_component, state, "kafka")
    await asyncio.sleep(hold_down_s)
    launched = time.monotonic()
    pid = start_component(state, spec, tie_to_parent=tie)
    await asyncio.to_thread(wait_ready, state, spec, pid)
    ready = time.monotonic()
    return {"stop_s": launched - stopping - hold_down_s, "start_to_ready_s": ready - launched,
            "down_s": ready - stopping, "ready_at": time.time(), "ready_mono": ready}


@pytest.mark.timeout(400)
async def test_restart_kafka_during_a_burst(stack, kube, kube_api, namespace, gpu_nodes):
    if not stack.state_dir:
        pytest.fail("attached stack without SHOAL_DEV_STATE_DIR: export what `shoal dev up` printed",
                    pytrace=False)
    state = Path(stack.state_dir)
    await install_base(stack.kubeconfig)  # CRDs and PriorityClasses (idempotent)
    attached = bool(os.environ.get("SHOAL_KUBECONFIG"))
    prefix = f"kfault{uuid.uuid4().hex[:6]}"
    names = await gpu_nodes(NODES, gpus=GPUS, pool=prefix, labels={"shoal.io/isolated": prefix})
    queue = f"q-{prefix}"
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    await kube.create(QUEUES, {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": queue},
                               "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}})
    services = OwnServices(stack, prefix)
    services.env["SHOAL_KAFKA_REQUEST_TIMEOUT_MS"] = str(REQUEST_TIMEOUT_MS)
    for spec in services.specs.values():
        spec.env = {**spec.env, "SHOAL_KAFKA_REQUEST_TIMEOUT_MS": str(REQUEST_TIMEOUT_MS)}
    try:
        for name in SERVICES:
            services.start(name)
        pids = dict(services.pids)
        groups, pods = workload(namespace, queue, prefix)
        await create_many(kube, PODGROUPS, groups, namespace)
        burst_started = time.monotonic()
        creating = asyncio.create_task(create_many(kube, PODS, pods, namespace, parallel=8))
        await asyncio.sleep(RESTART_AFTER_S)
        kafka = await restart_kafka(state, tie=not attached, hold_down_s=HOLD_DOWN_S)
        await creating
        try:
            await eventually(lambda: quiescent(kube, namespace), timeout_s=180, interval_s=3,
                             what="the burst to settle after the Kafka restart")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{await unsettled(kube, namespace)}") from None
        settled = time.monotonic()
        await check_invariants(kube, namespace, names)

        # every service rode out the outage: not one process replaced, each /healthz answers
        for name in SERVICES:
            found = read_pid(services.state, services.specs[name].name)
            assert found is not None and found[0] == pids[name] and alive(*found), (
                f"{name} crashed while Kafka was down:\n"
                + (services.state / "logs" / f"shoal-{name}.log").read_text(errors="replace")[-3000:])
            assert await asyncio.to_thread(healthz, services.specs[name].env["SHOAL_HTTP_PORT"]) == 200

        topic_prefix = services.env["SHOAL_TOPIC_PREFIX"]
        # the outage is not a reason to give up on a message: nothing was dead-lettered
        for topic in (SNAPSHOTS, FAIRSHARE, PLANS, BIND_RESULTS):
            dead = await record_times(stack.kafka_bootstrap, dlq(topic.full(topic_prefix)))
            assert not dead, f"{len(dead)} messages of {topic.name} dead-lettered during the Kafka outage"
        plans = await record_times(stack.kafka_bootstrap, PLANS.full(topic_prefix))
        after = [t for t in plans if t >= kafka["ready_at"]]
        assert after, "no plan was published after Kafka came back"
        report = {"kafka_held_down_s": HOLD_DOWN_S, "kafka_stop_s": round(kafka["stop_s"], 1),
                  "kafka_start_to_ready_s": round(kafka["start_to_ready_s"], 1),
                  "kafka_down_s": round(kafka["down_s"], 1),
                  "ready_to_next_plan_s": round(after[0] - kafka["ready_at"], 1),
                  "ready_to_settled_s": round(settled - kafka["ready_mono"], 1),
                  "burst_settled_s": round(settled - burst_started, 1),
                  "plans_before_after": [len(plans) - len(after), len(after)]}
        print(f"\nkafka fault test: {json.dumps(report)}")
    finally:
        services.stop()
        await kube.delete(QUEUES, queue)

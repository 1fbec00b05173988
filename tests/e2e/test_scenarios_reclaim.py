"""Reclaim between queues end to end (reference §10 S18, S20): explicit PodGroups and bare pods (nothing
recreates a victim). Victims leave through the Eviction API; the user sees an `Evict` event on the victim's
PodGroup (annotations evictor-action-type / evictor-pod-group-name), the reclaimer's pods `Pipelined` then
bound, and `evicted` decisions on the public stream.
"""

from __future__ import annotations

import re

from e2e_helpers import eventually
from scenario_helpers import (
    create,
    create_spaced,
    decision_events,
    events,
    is_running,
    node_of,
    pod,
    podgroup,
    pods,
    stays,
    wait_decisions,
    wait_events,
    wait_running,
)


def single(namespace: str, name: str, queue: str, pool: str, *, priority: str = "train") -> list[dict]:
    """A one-pod PodGroup `name` with pod `<name>-0` (1 GPU)."""
    return [podgroup(namespace, name, queue, pool, priority=priority),
            pod(namespace, f"{name}-0", queue, pool, group=name, grace=30)]


def queue_line(queue: str, priority: int = 100) -> re.Pattern:
    """Reference §4.4: "<queue> uses <alloc> with a quota of <deserved>, fair-share of <fair> and queue
    priority of <prio>." (the rendering of the amounts is not part of the reference text)."""
    return re.compile(rf"{re.escape(queue)} uses .+ with a quota of .+, fair-share of .+ and queue priority of "
                      rf"{priority}\.")


def check_reclaim_message(message: str, victim_pod: str, reclaimer_group: str, victim_q: str, reclaimer_q: str):
    first, *lines = message.split("\n")
    assert first == f"Pod {victim_pod} was preempted by workload {reclaimer_group}.", message
    assert len(lines) == 2, message
    assert queue_line(victim_q).fullmatch(lines[0]), message
    assert queue_line(reclaimer_q).fullmatch(lines[1]), message


async def check_evictions(kube, namespace: str, victims: list[str], reclaimers: list[str], a: str, b: str,
                          evicted: list[dict]) -> None:
    """Every victim PodGroup has one reclaim Evict event naming a reclaimer; the decisions agree."""
    by_victim = {e["subject"]: e["data"] for e in evicted}
    assert sorted(by_victim) == sorted(f"{namespace}/{v}-0" for v in victims)
    used = []
    for victim in victims:
        (event,) = await wait_events(kube, namespace, kind="PodGroup", name=victim, reason="Evict")
        notes = event["metadata"].get("annotations") or {}
        assert event["type"] == "Normal"
        assert notes["evictor-action-type"] == "reclaim"
        assert notes["evictor-pod-group-name"] in reclaimers
        assert notes["evictor-pod-group-namespace"] == namespace
        reclaimer = f"{namespace}/{notes['evictor-pod-group-name']}"
        check_reclaim_message(event["message"], f"{namespace}/{victim}-0", reclaimer, a, b)
        data = by_victim[f"{namespace}/{victim}-0"]
        assert data["action"] == "reclaim" and data["by"] == reclaimer and data["message"] == event["message"]
        used.append(notes["evictor-pod-group-name"])
    assert sorted(used) == sorted(reclaimers), "each reclaimer takes one victim"


async def no_more_evictions(stack, services, namespace: str, count: int, seconds: float = 4) -> None:
    """No ping-pong: over a few more cycles nothing else is evicted (reclaimers' pods included)."""
    async def unchanged():
        return len(await decision_events(stack, services, "evicted", namespace=namespace)) == count

    await stays(unchanged, seconds=seconds, interval_s=1.0, what=f"exactly {count} evictions")


async def test_s18_basic_reclaim_of_over_quota_work(shoal, stack, kube, namespace, node_pool, gpu_nodes, queues):
    (node,) = await gpu_nodes(1, gpus=8)
    a = await queues.add("a", gpu={"quota": 4, "limit": -1, "overQuotaWeight": 1})
    b = await queues.add("b", gpu={"quota": 4, "limit": -1, "overQuotaWeight": 1})
    # a0..a5 first, then a6, then a7: a7 is the newest PodGroup, a6 the next (victims go newest first)
    older = [doc for i in range(6) for doc in single(namespace, f"a{i}", a, node_pool)]
    await create_spaced(kube, [older, single(namespace, "a6", a, node_pool), single(namespace, "a7", a, node_pool)])
    await wait_running(kube, namespace, [f"a{i}-0" for i in range(8)])

    # b0 older than b1: created in the same second they tie, and whichever goes first takes the GPU its
    # victim frees, so the other one's reclaim is credited to it (both evictions "by b0", CI 2026-12-02)
    await create_spaced(kube, [single(namespace, "b0", b, node_pool), single(namespace, "b1", b, node_pool)])
    running = await wait_running(kube, namespace, ["b0-0", "b1-0"], timeout_s=60)
    assert {node_of(p) for p in running.values()} == {node}

    evicted = await wait_decisions(stack, shoal, "evicted", namespace=namespace, count=2)
    assert len(evicted) == 2, evicted
    await check_evictions(kube, namespace, ["a6", "a7"], ["b0", "b1"], a, b, evicted)
    for name in ("b0-0", "b1-0"):
        (event, *_) = await wait_events(kube, namespace, kind="Pod", name=name, reason="Pipelined")
        assert event["message"] == f"Pod {namespace}/{name} was pipelined to node {node}"

    now = await pods(kube, namespace)
    assert sorted(n for n, p in now.items() if n.startswith("a") and is_running(p)) == [f"a{i}-0" for i in range(6)]
    assert "a6-0" not in now and "a7-0" not in now, "bare victims are not recreated"
    await no_more_evictions(stack, shoal, namespace, 2)


async def test_s20_only_preemptible_over_quota_pods_are_reclaimed(shoal, stack, kube, namespace, node_pool, gpu_nodes,
                                                                  queues):
    await gpu_nodes(1, gpus=4)
    a = await queues.add("a", gpu={"quota": 2, "limit": -1, "overQuotaWeight": 1})
    b = await queues.add("b", gpu={"quota": 2, "limit": -1, "overQuotaWeight": 1})
    await create(kube, *single(namespace, "build0", a, node_pool, priority="build"),
                 *single(namespace, "build1", a, node_pool, priority="build"))
    await wait_running(kube, namespace, ["build0-0", "build1-0"])
    await create(kube, *single(namespace, "train0", a, node_pool), *single(namespace, "train1", a, node_pool))
    await wait_running(kube, namespace, ["train0-0", "train1-0"])

    # b0 older than b1 (see S18: reclaimers created in the same second tie, and the credit goes to either)
    await create_spaced(kube, [single(namespace, "b0", b, node_pool), single(namespace, "b1", b, node_pool)])
    await wait_running(kube, namespace, ["b0-0", "b1-0"], timeout_s=60)
    evicted = await wait_decisions(stack, shoal, "evicted", namespace=namespace, count=2)
    assert len(evicted) == 2, evicted
    await check_evictions(kube, namespace, ["train0", "train1"], ["b0", "b1"], a, b, evicted)

    async def each_queue_holds_two():
        now = await pods(kube, namespace)
        running = sorted(n for n, p in now.items() if is_running(p))
        return running if running == ["b0-0", "b1-0", "build0-0", "build1-0"] else None

    await eventually(each_queue_holds_two, timeout_s=30, what="a to keep its 2 build pods and b to run 2")
    await no_more_evictions(stack, shoal, namespace, 2)
    for build in ("build0", "build1"):
        assert not await events(kube, namespace, kind="PodGroup", name=build, reason="Evict")

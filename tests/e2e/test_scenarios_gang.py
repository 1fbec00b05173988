"""Gang scheduling end to end (reference §10 S1, S2, S3; seed 000 observation (a)) with real batch/v1 Jobs:
the controller-manager creates the pods, the podgrouper service groups them (`pg-<job>-<jobUID>`,
minMember from `kai.scheduler/batch-min-member`), and the scheduling services decide.
"""

from __future__ import annotations

from e2e_helpers import eventually
from scenario_helpers import (
    LAST_START,
    annotations_of,
    conditions_now,
    create,
    decision_events,
    events,
    job,
    node_of,
    pods,
    scheduling_condition,
    stays,
    wait_count_running,
    wait_events,
    wait_running,
)

from shoal.adapters.kube import JOBS, PODGROUPS

GANG_MESSAGE = ("PodSchedulingErrors: Resources were found for 2 pods while 3 are required for gang scheduling. "
                "Additional pods cannot be scheduled due to:")



async def job_pods(kube, namespace: str, name: str, count: int) -> dict[str, dict]:
    """The Job's `count` pods once the podgrouper has grouped them all."""
    async def check():
        now = await pods(kube, namespace, f"{name}-")
        grouped = all((p["metadata"].get("annotations") or {}).get("pod-group-name") for p in now.values())
        return now if len(now) == count and grouped else None

    return await eventually(check, timeout_s=60, what=f"{count} grouped pods of Job {name}")


async def test_s1_gang_of_three_two_gpu_pods_on_four_gpus_stays_pending(shoal, stack, kube, namespace, node_pool,
                                                                         gpu_nodes, queues):
    await gpu_nodes(1, gpus=4)
    q = await queues.add("q")
    await create(kube, job(namespace, "train", q, node_pool, parallelism=3, gpus=2, min_member=3))
    the_job = await kube.get(JOBS, "train", namespace=namespace)
    expected_group = f"pg-train-{the_job['metadata']['uid']}"

    members = await job_pods(kube, namespace, "train", 3)
    assert {p["metadata"]["annotations"]["pod-group-name"] for p in members.values()} == {expected_group}
    group = await kube.get(PODGROUPS, expected_group, namespace=namespace)
    assert group["spec"]["minMember"] == 3

    cond = await scheduling_condition(kube, namespace, expected_group)
    assert cond["type"] == "UnschedulableOnNodePool"
    assert cond["reason"] == "Unschedulable"
    assert cond["status"] == "True"
    assert cond["message"].startswith(GANG_MESSAGE), cond["message"]
    assert "didn't have enough resources: GPUs" in cond["message"]
    assert [r["reason"] for r in cond["reasons"]] == ["PodSchedulingErrors"]

    for name in members:
        found = await wait_events(kube, namespace, kind="Pod", name=name, reason="Unschedulable")
        assert all(e["type"] == "Warning" for e in found)

        async def pod_scheduled_false(name=name):
            current = (await pods(kube, namespace, name))[name]
            conds = {c["type"]: c for c in (current.get("status") or {}).get("conditions") or []}
            c = conds.get("PodScheduled")
            return c if c and c["status"] == "False" and c.get("reason") == "Unschedulable" else None

        await eventually(pod_scheduled_false, timeout_s=30, what=f"PodScheduled=False/Unschedulable on {name}")

    async def nothing_bound():
        now = await pods(kube, namespace, "train-")
        return len(now) == 3 and not any(node_of(p) for p in now.values())

    await stays(nothing_bound, seconds=4, what="no pod of the unsatisfiable gang is bound")
    assert not await decision_events(stack, shoal, "scheduled", namespace=namespace), "no bind was decided"


async def test_s1_control_without_min_member_two_pods_run_and_third_is_not_found(shoal, kube, namespace, node_pool,
                                                                                  gpu_nodes, queues):
    await gpu_nodes(1, gpus=4)
    q = await queues.add("q")
    await create(kube, job(namespace, "train", q, node_pool, parallelism=3, gpus=2))
    members = await job_pods(kube, namespace, "train", 3)
    group = next(iter(members.values()))["metadata"]["annotations"]["pod-group-name"]
    assert (await kube.get(PODGROUPS, group, namespace=namespace))["spec"]["minMember"] == 1

    running = await wait_count_running(kube, namespace, "train-", 2)
    (left,) = set(members) - set(running)
    found = await wait_events(kube, namespace, kind="Pod", name=left, reason="Unschedulable")
    assert found[-1]["type"] == "Warning"
    assert found[-1]["message"].startswith(f"Resources were not found for pod {namespace}/{left} due to: "), \
        found[-1]["message"]
    assert "didn't have enough resources: GPUs" in found[-1]["message"]
    # the job already has allocated pods: its PodGroup condition is not written (reference §2.2)
    assert await conditions_now(kube, namespace, group) == []
    assert not node_of((await pods(kube, namespace, left))[left])


async def test_s2_gang_fits_atomically_in_one_decision(shoal, stack, kube, namespace, node_pool, gpu_nodes, queues):
    await gpu_nodes(1, gpus=6)
    q = await queues.add("q")
    await create(kube, job(namespace, "train", q, node_pool, parallelism=3, gpus=2, min_member=3))
    members = await job_pods(kube, namespace, "train", 3)
    group = next(iter(members.values()))["metadata"]["annotations"]["pod-group-name"]
    await wait_running(kube, namespace, members)

    scheduled = await decision_events(stack, shoal, "scheduled", namespace=namespace)
    assert sorted(e["subject"] for e in scheduled) == sorted(f"{namespace}/{n}" for n in members)
    assert len({e["planid"] for e in scheduled}) == 1, "all three binds must come from the same cycle"
    for name in members:
        (event,) = await wait_events(kube, namespace, kind="Pod", name=name, reason="Scheduled")
        node = node_of((await pods(kube, namespace, name))[name])
        assert event["message"] == f"Successfully assigned pod {namespace}/{name} to node {node} at node-pool {node_pool}"

    async def stamped():
        return (await annotations_of(kube, namespace, group)).get(LAST_START)

    stamp = await eventually(stamped, timeout_s=30, what=f"{LAST_START} on the PodGroup")
    assert stamp.endswith("Z") and "T" in stamp, stamp  # RFC3339
    assert await conditions_now(kube, namespace, group) == []


async def test_s3_gang_not_ready_gets_only_a_not_ready_event(shoal, stack, kube, namespace, node_pool, gpu_nodes,
                                                            queues):
    await gpu_nodes(1, gpus=8)
    q = await queues.add("q")
    await create(kube, job(namespace, "train", q, node_pool, parallelism=2, gpus=1, min_member=3))
    members = await job_pods(kube, namespace, "train", 2)
    group = next(iter(members.values()))["metadata"]["annotations"]["pod-group-name"]

    expected = "Job is not ready for scheduling. Waiting for 3 pods, currently 2 exist, 0 are gated"

    async def not_ready_event():
        # while the podgrouper annotates the pods one by one an earlier event may say "currently 1 exist"
        found = await events(kube, namespace, kind="PodGroup", name=group, reason="NotReady")
        return [e for e in found if e["message"] == expected]

    (event, *_) = await eventually(not_ready_event, timeout_s=60, what=f"a NotReady event: {expected}")
    assert event["type"] == "Normal"

    async def untouched():
        now = await pods(kube, namespace, "train-")
        return (len(now) == 2 and not any(node_of(p) for p in now.values())
                and await conditions_now(kube, namespace, group) == [])

    await stays(untouched, seconds=4, what="no allocation and no scheduling condition for a gang that is not ready")
    assert not await decision_events(stack, shoal, "scheduled", namespace=namespace)
    assert not await decision_events(stack, shoal, "unschedulable", namespace=namespace)

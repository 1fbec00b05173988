"""The podgrouper's reconcile loop against an in-memory API: idempotent, 409-tolerant, warns and retries."""

from __future__ import annotations

import asyncio
import contextlib
import copy

import pytest

from services.podgrouper.handlers import PodGrouper
from shoal.errors import ConflictError, NotFoundError, PermanentError
from shoal.metrics import Metrics


class FakeKube:
    def __init__(self, objects=()):
        self.store: dict[tuple[str, str, str], dict] = {}
        self.writes: list[tuple[str, str, str]] = []
        self.reads: list[tuple[str, str]] = []
        self.fail_create: dict[str, Exception] = {}
        self.race: dict | None = None  # an object "someone else" creates just before our create
        for obj in objects:
            self.put(obj)

    @staticmethod
    def key(plural, namespace, name):
        return (plural, namespace or "", name)

    def put(self, obj, plural=None):
        plural = plural or obj["kind"].lower() + "s"
        self.store[self.key(plural, obj["metadata"].get("namespace"), obj["metadata"]["name"])] = copy.deepcopy(obj)

    async def get(self, resource, name, *, namespace=None, subresource=None, cached=False):
        self.reads.append((resource.plural, name))
        obj = self.store.get(self.key(resource.plural, namespace, name))
        if obj is None:
            raise NotFoundError(f"{resource.plural}/{name} not found", status=404)
        return copy.deepcopy(obj)

    async def list(self, resource, **kwargs):
        return [copy.deepcopy(o) for (plural, _, _), o in self.store.items() if plural == resource.plural], "1"

    async def create(self, resource, body, *, namespace=None, **kwargs):
        if resource.plural in self.fail_create:
            raise self.fail_create[resource.plural]
        if self.race is not None and resource.plural == "podgroups":
            self.put(self.race, "podgroups")
            self.race = None
        key = self.key(resource.plural, namespace, body["metadata"]["name"])
        if key in self.store:
            raise ConflictError("exists", status=409)
        self.writes.append(("create", resource.plural, body["metadata"]["name"]))
        self.store[key] = copy.deepcopy(dict(body))
        return body

    async def patch(self, resource, name, body, *, namespace=None, **kwargs):
        key = self.key(resource.plural, namespace, name)
        if key not in self.store:
            raise NotFoundError("gone", status=404)
        self.writes.append(("patch", resource.plural, name))
        merge(self.store[key], body)
        return copy.deepcopy(self.store[key])


def merge(target: dict, patch: dict) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


JOB = {"apiVersion": "batch/v1", "kind": "Job",
       "metadata": {"name": "train", "namespace": "ns", "uid": "job-uid",
                    "annotations": {"kai.scheduler/batch-min-member": "2"}}, "spec": {}}


def pod(name="train-a", owner_uid="job-uid", kind="Job", api_version="batch/v1", owner_name="train"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": owner_name,
                                              "uid": owner_uid, "controller": True}]},
            "spec": {"schedulerName": "shoal-scheduler", "containers": [{"name": "c"}]}}


def grouper(kube, bare_annotate_delay_s: float = 0.0) -> PodGrouper:
    """A podgrouper that annotates bare pods at once unless told to wait for their bind."""
    return PodGrouper(kube=kube, metrics=Metrics(), retry_initial_s=0.05, retry_max_s=0.1,
                      bare_annotate_delay_s=bare_annotate_delay_s)


async def test_reconcile_is_idempotent():
    p = pod()
    kube = FakeKube([JOB, p])
    g = grouper(kube)
    assert await g.reconcile(p) == "grouped"
    assert kube.writes == [("create", "podgroups", "pg-train-job-uid"), ("patch", "pods", "train-a")]
    pg = kube.store[("podgroups", "ns", "pg-train-job-uid")]
    assert pg["spec"]["minMember"] == 2
    kube.writes.clear()
    annotated = kube.store[("pods", "ns", "train-a")]
    assert annotated["metadata"]["annotations"]["pod-group-name"] == "pg-train-job-uid"
    assert await g.reconcile(annotated) == "unchanged"
    assert kube.writes == []


async def test_conflict_on_create_rereads_and_converges():
    p = pod()
    kube = FakeKube([JOB, p])
    g = grouper(kube)
    stale = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": "pg-train-job-uid", "namespace": "ns"}, "spec": {"minMember": 1, "queue": "x"}}
    kube.race = stale
    assert await g.reconcile(p) == "grouped"
    pg = kube.store[("podgroups", "ns", "pg-train-job-uid")]
    assert pg["spec"]["minMember"] == 2 and pg["spec"]["queue"] == "default-queue"
    assert pg["metadata"]["ownerReferences"][0]["uid"] == "job-uid"


async def test_unreadable_owner_warns_and_retries_then_groups():
    p = pod(kind="Widget", api_version="example.com/v1", owner_name="w1", owner_uid="w-uid")
    kube = FakeKube([p])
    g = grouper(kube)
    key = "ns/train-a"
    g.latest[key] = p
    worker = asyncio.create_task(g.work())
    try:
        g.mark(key)

        async def until(check):
            for _ in range(100):
                if check():
                    return
                await asyncio.sleep(0.02)
            raise AssertionError("timed out")

        await until(lambda: any(plural == "events" for _, plural, _ in kube.writes))
        event = next(o for (plural, _, _), o in kube.store.items() if plural == "events")
        assert event["reason"] == "PodGrouperWarning" and "Widget ns/w1" in event["message"]
        assert g._attempts.get(key, 0) >= 1
        kube.put({"apiVersion": "example.com/v1", "kind": "Widget",
                  "metadata": {"name": "w1", "namespace": "ns", "uid": "w-uid"}})
        await until(lambda: ("podgroups", "ns", "pg-w1-w-uid") in kube.store)
        await until(lambda: key not in g._attempts)
        assert g.stats()["retrying"] == 0 and g.stats()["pending"] == 0
    finally:
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker


async def test_owner_with_another_uid_is_not_trusted():
    p = pod(owner_uid="old-uid")
    g = grouper(FakeKube([JOB, p]))
    with pytest.raises(Exception, match="uid job-uid, the pod names old-uid"):
        await g.reconcile(p)


async def test_rejected_podgroup_becomes_a_warning_not_a_crash():
    p = pod()
    kube = FakeKube([JOB, p])
    kube.fail_create["podgroups"] = PermanentError("spec.queue: Invalid value", status=422)
    g = grouper(kube)
    g.latest["ns/train-a"] = p
    await g._handle("ns/train-a")
    events = [o for (plural, _, _), o in kube.store.items() if plural == "events"]
    assert len(events) == 1 and "cannot create or update the PodGroup" in events[0]["message"]
    assert g._attempts["ns/train-a"] == 1
    g.forget("ns/train-a")


async def test_skipped_and_bare_pods():
    bare = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "solo", "namespace": "ns", "uid": "u1", "annotations": {"pod-group-name": "mine"}},
            "spec": {"schedulerName": "shoal-scheduler"}}
    kube = FakeKube([bare])
    g = grouper(kube)
    assert await g.reconcile(bare) == "skipped:bare pod with pod-group-name"
    assert kube.writes == []
    del bare["metadata"]["annotations"]
    assert await g.reconcile(bare) == "following"  # grouped, and its PodGroup followed until the pod's bind
    assert ("podgroups", "ns", "pg-solo-u1") in kube.store


def bare_pod(name="solo", node=None, scheduled_at=None):
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
           "spec": {"schedulerName": "shoal-scheduler", "containers": [{"name": "c"}]}, "status": {}}
    if node:
        obj["spec"]["nodeName"] = node
    if scheduled_at:
        obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled_at}]
    return obj


LAST_START = "kai.scheduler/last-start-timestamp"


async def test_a_podgroup_made_for_a_bound_pod_carries_its_start_stamp():
    """A bare pod is scheduled without waiting for its PodGroup (the scheduler's start stamp then finds no
    PodGroup to annotate): the PodGroup made for a pod that is bound already says when the pod started."""
    bound = bare_pod(node="n1", scheduled_at="2026-12-05T10:00:00Z")
    kube = FakeKube([bound])
    assert await grouper(kube).reconcile(bound) == "grouped"
    pg = kube.store[("podgroups", "ns", "pg-solo-uid-solo")]
    assert pg["metadata"]["annotations"][LAST_START] == "2026-12-05T10:00:00Z"
    assert kube.writes == [("create", "podgroups", "pg-solo-uid-solo"), ("patch", "pods", "solo")]
    pending = bare_pod("waiting")
    kube = FakeKube([pending])
    assert await grouper(kube).reconcile(pending) == "following"
    assert LAST_START not in kube.store[("podgroups", "ns", "pg-waiting-uid-waiting")]["metadata"].get("annotations", {})


async def test_a_bind_between_the_read_and_the_pod_patch_stamps_the_new_podgroup():
    """Read unbound, bound before the podgrouper's pod patch (whose answer shows it): the PodGroup it has just
    created gets the pod's start stamp, which the scheduler's own stamp may have missed."""
    read = bare_pod()
    kube = FakeKube([bare_pod(node="n1", scheduled_at="2026-12-05T10:00:01Z")])  # the cluster has it bound
    assert await grouper(kube).reconcile(read) == "grouped"
    pg = kube.store[("podgroups", "ns", "pg-solo-uid-solo")]
    assert pg["metadata"]["annotations"][LAST_START] == "2026-12-05T10:00:01Z"
    assert kube.writes == [("create", "podgroups", "pg-solo-uid-solo"), ("patch", "pods", "solo"),
                           ("patch", "podgroups", "pg-solo-uid-solo")]
    # an owned pod waits for its PodGroup before it is scheduled: no race, no stamp from the podgrouper
    p = pod()
    kube = FakeKube([JOB, {**p, "spec": {**p["spec"], "nodeName": "n1"}}])
    assert await grouper(kube).reconcile(p) == "grouped"
    assert LAST_START not in kube.store[("podgroups", "ns", "pg-train-job-uid")]["metadata"].get("annotations", {})


def bound_by_binding(pod: dict, node: str = "n1", at: str = "2026-12-06T03:00:00Z") -> dict:
    """The pod as its Binding leaves it: on the node, scheduled, and carrying the pod-group-name the Binding had."""
    out = copy.deepcopy(pod)
    out["spec"]["nodeName"] = node
    out["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at}]
    out["metadata"].setdefault("annotations", {})["pod-group-name"] = f"pg-{pod['metadata']['name']}-{pod['metadata']['uid']}"
    return out


async def wait_until(check, timeout_s: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def watching_one_bare_pod(delay_s: float):
    """A podgrouper with its workers running, handed the pending bare pod ns/solo by its watch; yields
    (podgrouper, API, pod) once the pod waits for its bind."""
    pending = bare_pod()
    kube = FakeKube([pending])
    g = grouper(kube, bare_annotate_delay_s=delay_s)
    worker = asyncio.create_task(g.work())
    try:
        g._offer(pending, "shoal-scheduler")
        await wait_until(lambda: g.stats()["deferred"] == 1)
        yield g, kube, pending
    finally:
        worker.cancel()


async def test_a_bare_pod_bound_within_the_wait_gets_its_podgroup_with_the_start_stamp_and_no_pod_patch():
    """Nothing is written while the pending bare pod waits; its bind (the Binding carried pod-group-name) brings
    one write: the PodGroup, created with the pod's start stamp (the scheduler's stamp found no PodGroup)."""
    async with watching_one_bare_pod(5.0) as (g, kube, pending):
        assert kube.writes == [] and "ns/solo" not in g._done
        bound = bound_by_binding(pending, at="2026-12-06T03:00:02Z")
        bound["metadata"].setdefault("labels", {})["runai-gpu-group"] = "g1"  # the bind's labels: no PodGroup's
        kube.put(bound)
        g._offer(bound, "shoal-scheduler")  # the watch brings the bound pod
        await wait_until(lambda: "ns/solo" in g._done)
        assert kube.writes == [("create", "podgroups", "pg-solo-uid-solo")]
        assert kube.reads == []
        pg = kube.store[("podgroups", "ns", "pg-solo-uid-solo")]
        assert pg["metadata"]["annotations"][LAST_START] == "2026-12-06T03:00:02Z"
        assert "runai-gpu-group" not in (pg["metadata"].get("labels") or {})
        assert g.stats()["deferred"] == 0 and not g._due and not g._first_seen and "ns/solo" not in g.latest


def declined(pod: dict, reason: str) -> dict:
    """The pod with the PodScheduled=False condition a scheduler (Unschedulable) or the apiserver (a scheduling
    gate) writes."""
    out = copy.deepcopy(pod)
    out["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": reason,
                                    "lastTransitionTime": "2026-12-06T03:00:01Z"}]
    return out


@pytest.mark.parametrize("reason", ["Unschedulable", "SchedulingGated"])
async def test_a_waiting_bare_pod_the_scheduler_cannot_place_gets_its_podgroup_at_once_and_is_followed(reason):
    """The wait is for a bind on its way: a pod the scheduler found no room for (or a gate holds) gets its
    PodGroup and annotation as soon as the watch shows its PodScheduled=False condition, long before the wait
    would end, so the PodGroup can carry the scheduler's conditions; its bind is then followed and stamped a
    short wait after it, not the long one."""
    async with watching_one_bare_pod(30.0) as (g, kube, pending):
        g.stamp_check_delay_s = 0.1
        assert kube.writes == []
        waiting = declined(pending, reason)
        kube.put(waiting)
        g._offer(waiting, "shoal-scheduler")
        await wait_until(lambda: g.stats()["following"] == 1 and not g._queued and not g._processing)
        assert kube.writes == [("create", "podgroups", "pg-solo-uid-solo"), ("patch", "pods", "solo")]
        assert g.stats()["deferred"] == 0 and not g._first_seen  # the long wait is over
        bound = bound_by_binding(kube.store[("pods", "ns", "solo")], at="2026-12-06T03:00:09Z")
        kube.put(bound)
        g._offer(bound, "shoal-scheduler")
        await wait_until(lambda: "ns/solo" in g._done)
    pg = kube.store[("podgroups", "ns", "pg-solo-uid-solo")]
    assert pg["metadata"]["annotations"][LAST_START] == "2026-12-06T03:00:09Z"
    assert g.stats()["following"] == 0 and g.stats()["deferred"] == 0 and not g._due


async def test_a_waiting_bare_pod_whose_scheduling_goes_on_waits_the_whole_time():
    """News of a pending pod that says nothing against its bind (here: a label added) does not end its wait."""
    async with watching_one_bare_pod(30.0) as (g, kube, pending):
        newer = copy.deepcopy(pending)
        newer["metadata"]["labels"] = {"team": "a"}
        newer["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]  # no nodeName: not bound
        g._offer(newer, "shoal-scheduler")
        await asyncio.sleep(0.1)
        assert kube.writes == [] and g.stats()["deferred"] == 1 and "ns/solo" in g._first_seen


def test_scheduling_declined_reads_only_a_false_podscheduled_condition():
    from services.podgrouper import translate as t

    assert t.scheduling_declined(declined(bare_pod(), "Unschedulable"))
    assert t.scheduling_declined(declined(bare_pod(), "SchedulingGated"))
    assert not t.scheduling_declined(bare_pod())
    assert not t.scheduling_declined(bare_pod(node="n1", scheduled_at="2026-12-06T03:00:00Z"))
    assert not t.scheduling_declined({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert not t.scheduling_declined({"status": None})


async def test_a_bare_pod_still_pending_when_the_wait_ends_gets_its_podgroup_and_annotation_then():
    async with watching_one_bare_pod(0.1) as (g, kube, _):
        assert kube.writes == []
        await wait_until(lambda: g.stats()["following"] == 1)
    assert kube.writes == [("create", "podgroups", "pg-solo-uid-solo"), ("patch", "pods", "solo")]
    assert kube.store[("pods", "ns", "solo")]["metadata"]["annotations"]["pod-group-name"] == "pg-solo-uid-solo"
    assert LAST_START not in kube.store[("podgroups", "ns", "pg-solo-uid-solo")]["metadata"].get("annotations", {})
    assert g.stats()["deferred"] == 0 and not g._due and not g._first_seen


@pytest.mark.parametrize("scheduler_stamped", [False, True])
async def test_a_podgroup_made_before_the_bind_is_followed_and_stamped_unless_the_scheduler_did(scheduler_stamped):
    """Still pending when the wait ends: PodGroup and annotation then; the pod is followed (nothing kept) until
    its bind, and once a wait after the bind has passed the PodGroup is read (watch cache) and stamped if the
    scheduler's plan, made before it knew the PodGroup, did not stamp it."""
    async with watching_one_bare_pod(0.1) as (g, kube, pending):
        await wait_until(lambda: g.stats()["following"] == 1 and not g._queued and not g._processing)
        assert kube.writes == [("create", "podgroups", "pg-solo-uid-solo"), ("patch", "pods", "solo")]
        assert "ns/solo" not in g._done and "ns/solo" not in g.latest
        g._offer(kube.store[("pods", "ns", "solo")], "shoal-scheduler")  # a status change while pending
        await asyncio.sleep(0.05)
        assert g.stats()["following"] == 1 and g.stats()["deferred"] == 0
        if scheduler_stamped:
            pg = kube.store[("podgroups", "ns", "pg-solo-uid-solo")]
            pg["metadata"].setdefault("annotations", {})[LAST_START] = "2026-12-06T03:00:05Z"
        bound = bound_by_binding(kube.store[("pods", "ns", "solo")], at="2026-12-06T03:00:06Z")
        kube.put(bound)
        g._offer(bound, "shoal-scheduler")
        await wait_until(lambda: "ns/solo" in g._done)
    pg = kube.store[("podgroups", "ns", "pg-solo-uid-solo")]
    stamp = "2026-12-06T03:00:05Z" if scheduler_stamped else "2026-12-06T03:00:06Z"
    assert pg["metadata"]["annotations"][LAST_START] == stamp
    assert ("podgroups", "pg-solo-uid-solo") in kube.reads
    extra = [] if scheduler_stamped else [("patch", "podgroups", "pg-solo-uid-solo")]
    assert kube.writes == [("create", "podgroups", "pg-solo-uid-solo"), ("patch", "pods", "solo"), *extra]
    assert g.stats()["following"] == 0 and g.stats()["deferred"] == 0 and not g._due


@pytest.mark.parametrize("scheduler_stamped", [False, True])
async def test_a_podgrouper_restarted_while_following_stamps_the_podgroup_its_pod_was_bound_to(scheduler_stamped):
    """The PodGroup was made before the bind by a podgrouper that restarted before the bind (nothing kept): the
    new one, seeing the bound pod, finds the PodGroup unstamped and stamps it; a scheduler's stamp is kept."""
    pending = bare_pod()
    kube = FakeKube([pending])
    assert await grouper(kube).reconcile(pending) == "following"
    if scheduler_stamped:
        pg = kube.store[("podgroups", "ns", "pg-solo-uid-solo")]
        pg["metadata"].setdefault("annotations", {})[LAST_START] = "2026-12-06T03:00:05Z"
    bound = bound_by_binding(kube.store[("pods", "ns", "solo")], at="2026-12-06T03:00:06Z")
    kube.put(bound)
    writes = list(kube.writes)
    assert await grouper(kube).reconcile(bound) == ("unchanged" if scheduler_stamped else "grouped")
    pg = kube.store[("podgroups", "ns", "pg-solo-uid-solo")]
    stamp = "2026-12-06T03:00:05Z" if scheduler_stamped else "2026-12-06T03:00:06Z"
    assert pg["metadata"]["annotations"][LAST_START] == stamp
    assert kube.writes == writes + ([] if scheduler_stamped else [("patch", "podgroups", "pg-solo-uid-solo")])


async def test_news_of_a_pod_that_came_while_it_was_grouped_does_not_group_it_again():
    """A watch event that lands while the pod is being handled queues it again; a pod done by then is left."""
    p = pod()
    kube = FakeKube([JOB, p])
    g = grouper(kube)
    g.latest["ns/train-a"] = p
    await g._handle("ns/train-a")
    assert g._done["ns/train-a"] == "uid-train-a" and "ns/train-a" not in g.latest
    writes = list(kube.writes)
    newer = copy.deepcopy(p)
    newer["metadata"].setdefault("labels", {})["runai-gpu-group"] = "g1"
    g.latest["ns/train-a"] = newer  # as `_again` leaves it
    await g._handle("ns/train-a")
    assert kube.writes == writes and "ns/train-a" not in g.latest


async def test_a_bind_racing_the_annotation_at_the_end_of_the_wait_stamps_the_podgroup():
    """Still pending when the wait ends (read so), bound before the pod patch: the patch's answer shows the bind,
    and the PodGroup just created gets the start stamp the scheduler's could not give it."""
    async with watching_one_bare_pod(0.1) as (g, kube, pending):
        kube.put(bound_by_binding(pending, at="2026-12-06T03:00:04Z"))  # the cluster has it bound, the watch not yet
        await wait_until(lambda: "ns/solo" in g._done)
    pg = kube.store[("podgroups", "ns", "pg-solo-uid-solo")]
    assert pg["metadata"]["annotations"][LAST_START] == "2026-12-06T03:00:04Z"
    assert kube.writes == [("create", "podgroups", "pg-solo-uid-solo"), ("patch", "pods", "solo"),
                           ("patch", "podgroups", "pg-solo-uid-solo")]


async def test_a_bare_pod_named_by_its_binding_before_the_podgrouper_saw_it_still_gets_its_podgroup():
    """The podgrouper's own name on a bare pod is not a user's PodGroup (which it leaves alone): the pod was
    bound, and its Binding named the PodGroup, before the podgrouper got to it."""
    bound = bound_by_binding(bare_pod(), at="2026-12-06T03:00:03Z")
    kube = FakeKube([bound])
    g = grouper(kube, bare_annotate_delay_s=5.0)
    assert await g.reconcile(bound) == "grouped"
    pg = kube.store[("podgroups", "ns", "pg-solo-uid-solo")]
    assert pg["metadata"]["annotations"][LAST_START] == "2026-12-06T03:00:03Z"
    assert "pod-group-name" not in pg["metadata"]["annotations"]  # the pod's membership, not PodGroup metadata
    assert kube.writes == [("create", "podgroups", "pg-solo-uid-solo")]
    own = copy.deepcopy(bound)
    own["metadata"]["annotations"]["pod-group-name"] = "someone-elses"
    assert await g.reconcile(own) == "skipped:bare pod with pod-group-name"


async def test_skip_podgrouper_is_honoured_and_a_pod_without_pod_group_name_is_reported():
    grove = pod("prefill-0")
    grove["metadata"]["annotations"] = {"pod-group-name": "gang", "kai.scheduler/skip-podgrouper": "true"}
    kube = FakeKube([JOB, grove])
    g = grouper(kube)
    assert await g.reconcile(grove) == "skipped:skip-podgrouper"
    assert kube.writes == [] and kube.reads == []  # the pod itself says so: no owner is read
    del grove["metadata"]["annotations"]["pod-group-name"]
    assert await g.reconcile(grove) == "skipped:skip-podgrouper without pod-group-name"
    events = [o for (plural, _, _), o in kube.store.items() if plural == "events"]
    assert len(events) == 1 and "no pod-group-name annotation" in events[0]["message"], events
    assert not any(plural == "podgroups" for plural, _, _ in kube.store)



async def test_a_burst_of_pods_reads_the_owner_once_and_creates_the_new_podgroup_without_reading_it():
    pods = [pod(f"train-{i}") for i in range(3)]
    kube = FakeKube([JOB, *pods])
    g = grouper(kube)
    assert [await g.reconcile(p) for p in pods] == ["grouped", "grouped", "grouped"]
    assert kube.reads.count(("jobs", "train")) == 1
    assert kube.reads.count(("podgroups", "pg-train-job-uid")) == 0  # never seen: created first, no GET
    assert [w for w in kube.writes if w[1] == "podgroups"] == [("create", "podgroups", "pg-train-job-uid")]


async def test_concurrent_pods_of_one_owner_write_their_podgroup_once():
    pods = [pod(f"train-{i}") for i in range(8)]
    kube = FakeKube([JOB, *pods])
    g = grouper(kube)
    creates = 0
    create = kube.create

    async def slow_create(resource, body, **kwargs):  # a round trip long enough for the others to race
        nonlocal creates
        if resource.plural == "podgroups":
            creates += 1
        await asyncio.sleep(0.01)
        return await create(resource, body, **kwargs)

    kube.create = slow_create
    assert await asyncio.gather(*(g.reconcile(p) for p in pods)) == ["grouped"] * 8
    assert creates == 1  # one writer per PodGroup: no second create that would end in 409
    assert kube.reads.count(("podgroups", "pg-train-job-uid")) == 0
    assert g._group_locks == {}  # locks are dropped once nobody waits on them
    assert all(kube.store[("pods", "ns", p["metadata"]["name"])]["metadata"]["annotations"]["pod-group-name"]
               == "pg-train-job-uid" for p in pods)


async def test_a_podgroup_seen_before_is_read_first_and_patched_when_it_drifted():
    p = pod()
    kube = FakeKube([JOB, p])
    g = grouper(kube)
    g.cache_ttl_s = 0.0  # every reconcile goes to the API
    assert await g.reconcile(p) == "grouped"
    kube.store[("podgroups", "ns", "pg-train-job-uid")]["spec"]["minMember"] = 7  # someone changed it
    kube.writes.clear()
    kube.reads.clear()
    annotated = kube.store[("pods", "ns", "train-a")]
    assert await g.reconcile(annotated) == "grouped"
    assert kube.reads.count(("podgroups", "pg-train-job-uid")) == 1
    assert kube.writes == [("patch", "podgroups", "pg-train-job-uid")]  # read then patched, no create tried
    assert kube.store[("podgroups", "ns", "pg-train-job-uid")]["spec"]["minMember"] == 2


async def test_an_unexpected_error_on_one_pod_is_reported_and_retried():
    p = pod()
    kube = FakeKube([JOB, p])
    kube.fail_create["podgroups"] = RuntimeError("surprise")
    g = grouper(kube)
    g.latest["ns/train-a"] = p
    await g._handle("ns/train-a")
    [event] = [o for (plural, _, _), o in kube.store.items() if plural == "events"]
    assert "RuntimeError: surprise" in event["message"]
    assert g._attempts["ns/train-a"] == 1
    g.forget("ns/train-a")


async def test_watch_queues_new_pods_once_and_forgets_deleted(monkeypatch):
    from services.podgrouper import handlers
    from shoal.adapters.kube_watch import WatchEvent

    a, b = pod("train-a"), pod("train-b")
    kube = FakeKube([JOB, a, b])
    g = grouper(kube)
    gate = asyncio.Event()

    class Script:
        def __init__(self, *args, **kwargs):
            pass

        async def __aiter__(self):
            yield WatchEvent("SYNCED", objects=[copy.deepcopy(a), copy.deepcopy(b)])
            await gate.wait()
            yield WatchEvent("MODIFIED", object=copy.deepcopy(a))  # already grouped: not queued again
            yield WatchEvent("DELETED", object=copy.deepcopy(b))
            yield WatchEvent("SYNCED", objects=[])  # a re-list without train-a: forgotten too

    monkeypatch.setattr(handlers, "ListWatch", Script)
    worker = asyncio.create_task(g.work())
    try:
        watching = asyncio.create_task(g.watch("shoal-scheduler"))
        for _ in range(100):
            if len(g._done) == 2:
                break
            await asyncio.sleep(0.01)
        assert g.synced == {"shoal-scheduler"} and g.ready(["shoal-scheduler"])
        assert set(g._done) == {"ns/train-a", "ns/train-b"} and g.latest == {}, "handled pods are not kept"
        writes = len(kube.writes)
        gate.set()
        await asyncio.wait_for(watching, 5)
        await asyncio.sleep(0.05)
        assert len(kube.writes) == writes and g._queued == set()
        assert g._names == {} and g._done == {}
    finally:
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker

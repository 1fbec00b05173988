"""The binder's bind path against in-memory fakes: round trips per bind, publishes batched per phase."""

from __future__ import annotations

import asyncio

import pytest

from services.binder.handlers import Binder
from shoal.adapters.kafka import Delivery
from shoal.adapters.kube import PODS
from shoal.core.plan import Bind, Pipeline, PodEvent
from shoal.errors import NotFoundError, PermanentError
from shoal.messages.base import new_meta
from shoal.messages.plan import BindResult, PlanIssued
from shoal.messages.snapshot import InFlightBind
from shoal.metrics import Metrics

DELIVERY = Delivery(topic="plans", partition=0, offset=0, key=None, headers=(), timestamp_ms=0)


class FakeKube:
    def __init__(self, pods: dict[str, dict]):
        self.pods = pods  # "ns/name" → pod
        self.calls: list[tuple] = []
        self.bound: set[str] = set()
        self.created_events: list[dict] = []
        self.bindings: list[dict] = []

    async def get(self, resource, name, *, namespace=None, **kwargs):
        self.calls.append(("get", resource.plural, f"{namespace}/{name}"))
        pod = self.pods.get(f"{namespace}/{name}")
        if pod is None:
            raise NotFoundError("gone", status=404)
        return pod

    async def create(self, resource, body, *, namespace=None, name=None, subresource=None, **kwargs):
        self.calls.append(("create", resource.plural, subresource))
        if subresource == "binding":
            self.bound.add(f"{namespace}/{name}")
            self.bindings.append(body)
        elif resource.plural == "events":
            self.created_events.append(body)
        return body

    async def patch(self, resource, name, body, **kwargs):
        self.calls.append(("patch", resource.plural, kwargs.get("subresource")))
        return body


class FakeInFlight:
    def __init__(self, entries: dict[str, InFlightBind]):
        self.entries = entries

    async def get(self, shard, pod_uid):
        return self.entries.get(pod_uid)

    async def get_many(self, shard, pod_uids):
        return {u: self.entries[u] for u in pod_uids if u in self.entries}

    async def remove(self, shard, pod_uids):
        return sum(self.entries.pop(u, None) is not None for u in pod_uids)


class FakeSeen:
    def __init__(self):
        self.marked: list[str] = []

    async def contains(self, message_id):
        return message_id in self.marked

    async def mark(self, message_id):
        self.marked.append(message_id)


class GatedBus:
    """Publishes complete only once `gate` is set; records what was sent and when it completed."""

    def __init__(self):
        self.gate = asyncio.Event()
        self.started: list[tuple[str, object]] = []
        self.done: list[tuple[str, object]] = []

    async def publish(self, topic, message, *, key=None, headers=None):
        self.started.append((topic, message))
        await self.gate.wait()
        self.done.append((topic, message))
        return 0, len(self.done)


def pods(n: int) -> dict[str, dict]:
    return {f"ns/p{i}": {"metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"uid-{i}"}, "spec": {}}
            for i in range(n)}


def plan_of(ops, plan_id="plan-1") -> PlanIssued:
    return PlanIssued(meta=new_meta("planner", revision=1, id=plan_id), shard="pool", plan_id=plan_id, revision=1,
                      ops=tuple(ops))


def binder(kube, inflight, bus, seen=None, parallel=1, **settings) -> Binder:
    return Binder(kube=kube, inflight=inflight, seen=seen or FakeSeen(), bus=bus, metrics=Metrics(),
                  parallel=parallel, **settings)


async def test_binds_do_not_wait_for_their_publishes_and_the_plan_is_marked_after_them():
    binds = [Bind(pod=f"ns/p{i}", pod_uid=f"uid-{i}", node="n1") for i in range(3)]
    inflight = FakeInFlight({b.pod_uid: InFlightBind(pod=b.pod, pod_uid=b.pod_uid, node="n1", plan_id="plan-1",
                                                     expires_at=1e12) for b in binds})
    kube, bus, seen = FakeKube(pods(3)), GatedBus(), FakeSeen()
    b = binder(kube, inflight, bus, seen, parallel=1)  # one bind at a time: an awaited publish would block the next
    task = asyncio.create_task(b.on_plan(plan_of(binds), DELIVERY))

    async def until(check):
        for _ in range(200):
            if check():
                return
            await asyncio.sleep(0.005)
        raise AssertionError("timed out")

    await until(lambda: len(kube.bound) == 3)  # every bind went out while no publish had completed
    assert bus.done == [] and seen.marked == [] and not task.done()
    bus.gate.set()
    await asyncio.wait_for(task, 5)
    assert seen.marked == ["plan-1"]
    results = [m for _, m in bus.done if isinstance(m, BindResult)]
    assert sorted(r.pod for r in results) == ["ns/p0", "ns/p1", "ns/p2"] and all(r.ok for r in results)
    assert len(bus.done) == 6  # a BindResult and a "bound" decision per pod


async def test_a_binding_carries_the_pods_podgroup_name_so_a_bare_pod_needs_no_second_write():
    """The apiserver copies a Binding's annotations onto the pod in the bind's own write: the pod-group-name the
    podgrouper would patch onto a bare pod comes with the bind (the same name for a pod that names it)."""
    ops = [Bind(pod="ns/p0", pod_uid="uid-0", node="n1", pod_group="ns/pg-p0-uid-0"),
           Bind(pod="ns/p1", pod_uid="uid-1", node="n1")]  # a plan from before it named the PodGroup
    inflight = FakeInFlight({op.pod_uid: InFlightBind(pod=op.pod, pod_uid=op.pod_uid, node="n1", plan_id="plan-1",
                                                      expires_at=1e12) for op in ops})
    kube, bus = FakeKube(pods(2)), GatedBus()
    bus.gate.set()
    await binder(kube, inflight, bus).on_plan(plan_of(ops), DELIVERY)
    by_pod = {b["metadata"]["name"]: b for b in kube.bindings}
    assert by_pod["p0"]["metadata"]["annotations"] == {"pod-group-name": "pg-p0-uid-0"}
    assert by_pod["p0"]["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert "annotations" not in by_pod["p1"]["metadata"]
    assert [c for c in kube.calls if c[1] == "pods" and c[0] == "patch"] == []


async def test_a_bind_reads_no_pod_and_its_event_names_the_ops_uid():
    op = Bind(pod="ns/p0", pod_uid="uid-0", node="n1")
    inflight = FakeInFlight({"uid-0": InFlightBind(pod=op.pod, pod_uid="uid-0", node="n1", plan_id="plan-1",
                                                   expires_at=1e12)})
    kube, bus = FakeKube(pods(1)), GatedBus()
    bus.gate.set()
    await binder(kube, inflight, bus).on_plan(plan_of([op]), DELIVERY)
    assert [c for c in kube.calls if c[0] == "get"] == []
    assert kube.calls == [("create", "pods", "binding"), ("create", "events", None)]
    (event,) = kube.created_events
    assert event["reason"] == "Scheduled" and event["involvedObject"]["uid"] == "uid-0"
    assert event["message"] == "Successfully assigned pod ns/p0 to node n1 at node-pool pool"


async def test_a_pipelined_pods_event_says_what_the_plan_says():
    op = Pipeline(pod="ns/p0", pod_uid="uid-0", node="n1", message="Pod ns/p0 was pipelined to node n1 (plan)")
    kube, bus = FakeKube(pods(1)), GatedBus()
    bus.gate.set()
    await binder(kube, FakeInFlight({}), bus).on_plan(plan_of([op]), DELIVERY)
    assert [(e["reason"], e["message"]) for e in kube.created_events] == [("Pipelined", op.message)]


async def test_an_unschedulable_pod_is_read_once_for_its_event_and_condition():
    op = PodEvent(pod="ns/p0", reason="Unschedulable", message="no node fits")
    kube, bus = FakeKube(pods(1)), GatedBus()
    bus.gate.set()
    await binder(kube, FakeInFlight({}), bus).on_plan(plan_of([op]), DELIVERY)
    assert [c for c in kube.calls if c[0] == "get"] == [("get", "pods", "ns/p0")]
    assert ("patch", "pods", "status") in kube.calls
    assert kube.created_events[0]["involvedObject"]["uid"] == "uid-0"


async def test_a_failed_publish_fails_the_plan_so_it_is_redelivered():
    op = Bind(pod="ns/p0", pod_uid="uid-0", node="n1")
    inflight = FakeInFlight({"uid-0": InFlightBind(pod=op.pod, pod_uid="uid-0", node="n1", plan_id="plan-1",
                                                   expires_at=1e12)})

    class BrokenBus:
        async def publish(self, topic, message, *, key=None, headers=None):
            raise ConnectionError("kafka down")

    seen = FakeSeen()
    b = binder(FakeKube(pods(1)), inflight, BrokenBus(), seen)
    with pytest.raises(ConnectionError):
        await b.on_plan(plan_of([op]), DELIVERY)
    assert seen.marked == [] and b._publishing == {}


async def test_every_binding_goes_out_before_the_binds_events():
    binds = [Bind(pod=f"ns/p{i}", pod_uid=f"uid-{i}", node="n1") for i in range(3)]
    inflight = FakeInFlight({b.pod_uid: InFlightBind(pod=b.pod, pod_uid=b.pod_uid, node="n1", plan_id="plan-1",
                                                     expires_at=1e12) for b in binds})
    kube, bus = FakeKube(pods(3)), GatedBus()
    bus.gate.set()
    await binder(kube, inflight, bus, parallel=1).on_plan(plan_of(binds), DELIVERY)
    kinds = [c[2] if c[2] else c[1] for c in kube.calls]
    assert kinds == ["binding"] * 3 + ["events"] * 3
    assert sorted(e["involvedObject"]["uid"] for e in kube.created_events) == ["uid-0", "uid-1", "uid-2"]


async def test_queue_statuses_are_written_alongside_the_last_phase():
    from shoal.core.plan import Annotate, QueueFigures, ResourceFigures

    kube = FakeKube({})
    queue_patched, annotated = asyncio.Event(), asyncio.Event()
    patch = kube.patch

    async def patch_waiting(resource, name, body, **kwargs):
        if resource.plural == "podgroups":  # the annotation waits for the queue status: sequential would hang
            await asyncio.wait_for(queue_patched.wait(), 5)
            annotated.set()
        elif resource.plural == "queues":
            queue_patched.set()
        return await patch(resource, name, body, **kwargs)

    kube.patch = patch_waiting
    bus, seen = GatedBus(), FakeSeen()
    bus.gate.set()
    plan = PlanIssued(meta=new_meta("planner", revision=1, id="plan-1"), shard="pool", plan_id="plan-1", revision=1,
                      ops=(Annotate(pod_group="ns/pg", key="k", value="v"),),
                      queues=(QueueFigures(name="q", gpu=ResourceFigures(allocated=1000, request=1000)),))
    b = binder(kube, FakeInFlight({}), bus, seen)
    await asyncio.wait_for(b.on_plan(plan, DELIVERY), 10)
    assert annotated.is_set() and seen.marked == ["plan-1"]
    assert ("patch", "queues", "status") in kube.calls
    kube.calls.clear()
    await b.on_plan(PlanIssued(meta=new_meta("planner", revision=2, id="plan-2"), shard="pool", plan_id="plan-2",
                               revision=2, ops=(), queues=plan.queues), DELIVERY)
    assert kube.calls == []  # unchanged figures are not written again


async def test_a_fraction_whose_lease_ran_out_while_waiting_for_its_gpu_is_not_bound():
    op = Bind(pod="ns/p0", pod_uid="uid-0", node="n1", gpu_groups=("g1",), fraction="0.50",
              received_resource_type="Fraction")
    inflight = FakeInFlight({"uid-0": InFlightBind(pod=op.pod, pod_uid="uid-0", node="n1", plan_id="plan-1",
                                                   expires_at=1e12)})
    kube, bus = FakeKube(pods(1)), GatedBus()
    bus.gate.set()
    b = binder(kube, inflight, bus)

    async def slow_reservation(bind_op, mode="NonMemoryEnforced"):  # the node agent took longer than the lease: a newer plan may reuse the GPU
        inflight.entries.clear()
        return "patch", {}

    b.prepare_fraction = slow_reservation
    await b.on_plan(plan_of([op]), DELIVERY)
    assert kube.bound == set(), "a bind past its lease could double-book the GPU"


class GatedKube(FakeKube):
    """Bindings of the pods in `held` wait for `gate`; events and patches are recorded in the order posted."""

    def __init__(self, pods, held):
        super().__init__(pods)
        self.held, self.gate = held, asyncio.Event()
        self.events: list[str] = []
        self.patched: list[tuple[str, str, dict]] = []

    async def create(self, resource, body, *, namespace=None, name=None, subresource=None, **kwargs):
        if subresource == "binding" and f"{namespace}/{name}" in self.held:
            await self.gate.wait()
        if resource.plural == "events":
            self.events.append(body["involvedObject"]["name"])
        return await super().create(resource, body, namespace=namespace, name=name, subresource=subresource)

    async def patch(self, resource, name, body, **kwargs):
        self.patched.append((resource.plural, name, body))
        return await super().patch(resource, name, body, **kwargs)


def _plan(plan_id: str, ops: tuple, gpus_allocated: int = 0) -> PlanIssued:
    from shoal.core.plan import QueueFigures, ResourceFigures

    queues = (QueueFigures(name="q", gpu=ResourceFigures(allocated=gpus_allocated, request=1000)),)
    return PlanIssued(meta=new_meta("planner", revision=1, id=plan_id), shard="pool", plan_id=plan_id, revision=1,
                      ops=ops, queues=queues if gpus_allocated else ())


async def test_pipelined_plans_bind_at_once_post_their_events_at_once_but_finish_in_plan_order():
    """The second plan's bind and its Scheduled event go out while the first plan's bind still waits; what a
    later plan may overwrite (here the PodGroup annotation) and its being applied come only after the first's
    (an event has nothing to wait for: waiting, it held a pipeline slot)."""
    from shoal.core.plan import Annotate

    first = Bind(pod="ns/p0", pod_uid="uid-0", node="n1")
    second = Bind(pod="ns/p1", pod_uid="uid-1", node="n1")
    inflight = FakeInFlight({
        "uid-0": InFlightBind(pod="ns/p0", pod_uid="uid-0", node="n1", plan_id="plan-1", expires_at=1e12),
        "uid-1": InFlightBind(pod="ns/p1", pod_uid="uid-1", node="n1", plan_id="plan-2", expires_at=1e12)})
    kube, seen = GatedKube(pods(2), held={"ns/p0"}), FakeSeen()
    bus = GatedBus()
    bus.gate.set()
    b = binder(kube, inflight, bus, seen, parallel=4)
    work_1 = await b.start_plan(_plan("plan-1", (first, Annotate(pod_group="ns/g", key="k", value="1"))), DELIVERY)
    work_2 = await b.start_plan(_plan("plan-2", (second, Annotate(pod_group="ns/g", key="k", value="2"))), DELIVERY)
    for _ in range(200):
        if kube.events:
            break
        await asyncio.sleep(0.005)
    assert kube.bound == {"ns/p1"} and kube.events == ["p1"]  # plan 2 bound and told while plan 1's bind waits
    await asyncio.sleep(0.05)
    assert not work_2.done() and seen.marked == [] and kube.patched == []  # its ordered rest waits for plan 1
    kube.gate.set()
    await asyncio.wait_for(asyncio.gather(work_1, work_2), 5)
    assert seen.marked == ["plan-1", "plan-2"] and kube.events == ["p1", "p0"]
    assert [body["metadata"]["annotations"]["k"] for _, _, body in kube.patched] == ["1", "2"]
    assert await b.start_plan(plan_of([first], "plan-1"), DELIVERY) is None  # applied: a redelivery is a no-op


def _held_bind_of_plan_1() -> tuple[Bind, GatedKube, FakeSeen, Binder]:
    """Plan 1's bind (pod ns/p0, leased to plan-1) and a binder whose apiserver holds that pod's binding until
    `kube.gate` is set."""
    first = Bind(pod="ns/p0", pod_uid="uid-0", node="n1")
    inflight = FakeInFlight({
        "uid-0": InFlightBind(pod="ns/p0", pod_uid="uid-0", node="n1", plan_id="plan-1", expires_at=1e12)})
    kube, seen = GatedKube(pods(1), held={"ns/p0"}), FakeSeen()
    bus = GatedBus()
    bus.gate.set()
    return first, kube, seen, binder(kube, inflight, bus, seen, parallel=4)


async def test_a_plan_waits_only_for_earlier_plans_writes_to_the_same_objects():
    """Plan 1's bind waits (its pod is held) before its annotation of g1; plan 2 annotates g2 and is applied at
    once, without waiting for plan 1; plan 3 annotates g1 again and waits for plan 1's annotation of g1 (a slow
    write to one PodGroup used to hold every later plan, and with them the consumer's pipeline slots)."""
    from shoal.core.plan import Annotate

    first, kube, seen, b = _held_bind_of_plan_1()
    work_1 = await b.start_plan(_plan("plan-1", (first, Annotate(pod_group="ns/g1", key="k", value="1"))), DELIVERY)
    work_2 = await b.start_plan(_plan("plan-2", (Annotate(pod_group="ns/g2", key="k", value="2"),)), DELIVERY)
    work_3 = await b.start_plan(_plan("plan-3", (Annotate(pod_group="ns/g1", key="k", value="3"),)), DELIVERY)
    await asyncio.wait_for(work_2, 5)
    await asyncio.sleep(0.05)
    assert seen.marked == ["plan-2"] and not work_1.done() and not work_3.done()
    assert [(name, body["metadata"]["annotations"]["k"]) for _, name, body in kube.patched] == [("g2", "2")]
    kube.gate.set()
    await asyncio.wait_for(asyncio.gather(work_1, work_3), 5)
    assert seen.marked == ["plan-2", "plan-1", "plan-3"]
    assert [(name, body["metadata"]["annotations"]["k"]) for _, name, body in kube.patched] == \
        [("g2", "2"), ("g1", "1"), ("g1", "3")]
    assert len(b._order) == 0  # every turn given up


async def test_a_failed_plan_gives_up_its_turns():
    """Plan 1 fails before its writes (its binds raise); plan 2's write to the same PodGroup, which waited for
    plan 1's turn, still goes out, and plan 2 is applied."""
    from shoal.core.plan import Annotate

    kube, seen = GatedKube(pods(1), held=set()), FakeSeen()
    bus = GatedBus()
    bus.gate.set()
    b = binder(kube, FakeInFlight({}), bus, seen, parallel=4)
    broken = asyncio.get_running_loop().create_future()

    async def failing_binds(plan):
        if plan.plan_id == "plan-1":
            await broken
            raise RuntimeError("binds failed")
        return [0.0]

    b._reserve_and_bind = failing_binds
    work_1 = await b.start_plan(_plan("plan-1", (Annotate(pod_group="ns/g", key="k", value="1"),)), DELIVERY)
    work_2 = await b.start_plan(_plan("plan-2", (Annotate(pod_group="ns/g", key="k", value="2"),)), DELIVERY)
    await asyncio.sleep(0.05)
    assert not work_2.done() and kube.patched == []  # plan 2's write waits for plan 1's turn on g
    broken.set_result(None)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(work_1, 5)
    await asyncio.wait_for(work_2, 5)
    assert [body["metadata"]["annotations"]["k"] for _, _, body in kube.patched] == ["2"]
    assert len(b._order) == 0 and seen.marked == ["plan-2"]


async def test_queue_status_is_left_to_a_later_plan_already_under_way():
    """Plans 1 and 2 both carry the queue's figures; plan 2 started before plan 1 finished, so only its
    (newer) figures are written. A plan with no later one writes its own (no interval between writes here:
    test_binder_queue_status)."""
    first, kube, seen, b = _held_bind_of_plan_1()
    b.queue_status_interval_s = 0.0
    work_1 = await b.start_plan(_plan("plan-1", (first,), gpus_allocated=1000), DELIVERY)
    work_2 = await b.start_plan(_plan("plan-2", (), gpus_allocated=2000), DELIVERY)
    kube.gate.set()
    await asyncio.wait_for(asyncio.gather(work_1, work_2), 5)
    assert sorted(seen.marked) == ["plan-1", "plan-2"]  # plan 2, with nothing of plan 1's to follow, first
    written = [body["status"] for plural, _, body in kube.patched if plural == "queues"]
    assert len(written) == 1 and written[0]["allocated"]["nvidia.com/gpu"] == "2", written
    await b.on_plan(_plan("plan-3", (), gpus_allocated=3000), DELIVERY)
    written = [body["status"] for plural, _, body in kube.patched if plural == "queues"]
    assert len(written) == 2 and written[1]["allocated"]["nvidia.com/gpu"] == "3", written


class RejectingKube(FakeKube):
    """The apiserver rejects every binding (as an admission policy on pods/binding does)."""

    def __init__(self, objects):
        super().__init__(objects)
        self.patches: list[tuple[str, str, dict]] = []

    async def create(self, resource, body, *, namespace=None, name=None, subresource=None, **kwargs):
        if subresource == "binding":
            self.calls.append(("create", resource.plural, subresource))
            raise PermanentError("pods/binding is forbidden: denied by policy", status=403)
        return await super().create(resource, body, namespace=namespace, name=name, subresource=subresource)

    async def patch(self, resource, name, body, **kwargs):
        self.patches.append((resource.plural, f"{kwargs.get('namespace')}/{name}", body))
        return await super().patch(resource, name, body, **kwargs)


async def test_a_failed_bind_round_is_counted_once_per_plan_on_the_podgroup_before_the_lease_goes():
    group = {"metadata": {"name": "g", "namespace": "ns", "annotations": {"shoal.io/bind-failures": "2"}}}
    binds = [Bind(pod=f"ns/p{i}", pod_uid=f"uid-{i}", node="n1", pod_group="ns/g") for i in range(2)]
    inflight = FakeInFlight({b.pod_uid: InFlightBind(pod=b.pod, pod_uid=b.pod_uid, node="n1", plan_id="plan-1",
                                                     expires_at=1e12) for b in binds})
    kube, bus = RejectingKube({**pods(2), "ns/g": group}), GatedBus()
    bus.gate.set()
    await binder(kube, inflight, bus).on_plan(plan_of(binds), DELIVERY)
    counted = [body for plural, key, body in kube.patches if plural == "podgroups" and key == "ns/g"]
    assert len(counted) == 1, kube.patches
    annotations = counted[0]["metadata"]["annotations"]
    assert annotations["shoal.io/bind-failures"] == "3"
    assert annotations["shoal.io/last-bind-error"] == "pods/binding is forbidden: denied by policy"
    assert annotations["shoal.io/last-bind-failure"].endswith("Z")
    assert inflight.entries == {}, "the leases are removed: the pods are planned again once the back-off ends"
    decisions = [m for _, m in bus.done if getattr(m, "type", "").endswith("bind-failed")]
    assert sorted(d.data["bindFailures"] or 0 for d in decisions) == [0, 3]


class ReservingKube(FakeKube):
    """Reservation pods are stored on create (409 once one exists) and get their GPU id at once."""

    async def create(self, resource, body, *, namespace=None, name=None, subresource=None, **kwargs):
        if resource.plural == "pods" and subresource is None:
            key = f"{namespace}/{body['metadata']['name']}"
            self.calls.append(("create", "pods", None))
            if key in self.pods:
                from shoal.errors import ConflictError
                raise ConflictError("exists", status=409)
            self.pods[key] = {**body, "metadata": {**body["metadata"],
                                                   "annotations": {"run.ai/reserve_for_gpu_index": "GPU-1"}}}
            return body
        return await super().create(resource, body, namespace=namespace, name=name, subresource=subresource)


async def test_a_reserved_gpu_gets_one_reservation_create_for_its_plan_and_its_binds():
    """The plan's Reserve makes the GPU's reservation pod; the two fractions bound into that GPU find it
    and post no create of their own (each was a 409 at the apiserver before), and a reservation pod deleted
    behind the binder's back is made again when a bind waits on it."""
    from shoal.core.plan import Reserve

    ops = [Reserve(node="n1", gpu_group="g1", gpu_index=0)]
    for i in range(2):
        ops.append(Bind(pod=f"ns/p{i}", pod_uid=f"uid-{i}", node="n1", gpu_groups=("g1",), fraction="0.50",
                        received_resource_type="Fraction"))
    inflight = FakeInFlight({f"uid-{i}": InFlightBind(pod=f"ns/p{i}", pod_uid=f"uid-{i}", node="n1",
                                                      plan_id="plan-1", expires_at=1e12) for i in range(2)})
    kube, bus = ReservingKube(pods(2)), GatedBus()
    bus.gate.set()
    b = binder(kube, inflight, bus)
    await b.on_plan(plan_of(ops), DELIVERY)
    assert kube.bound == {"ns/p0", "ns/p1"}
    assert kube.calls.count(("create", "pods", None)) == 1
    reservation = next(key for key in kube.pods if key.startswith("kai-resource-reservation/"))
    del kube.pods[reservation]  # deleted behind the binder's back
    kube.calls.clear()
    assert await b.ensure_reservation("n1", "g1", wait=True) == "GPU-1"
    assert kube.calls.count(("create", "pods", None)) == 1


class HeldReservationKube(ReservingKube):
    """Reservation pod creates wait for `gate`; everything else answers at once."""

    def __init__(self, pods):
        super().__init__(pods)
        self.gate = asyncio.Event()
        self.reservation_posts = 0

    async def create(self, resource, body, *, namespace=None, name=None, subresource=None, **kwargs):
        if resource.plural == "pods" and subresource is None:
            self.reservation_posts += 1
            await self.gate.wait()
        return await super().create(resource, body, namespace=namespace, name=name, subresource=subresource)


async def test_a_whole_gpu_bind_does_not_wait_for_the_plans_reservation_pods():
    """A plan's reservations and binds go out together: the whole-GPU pod is bound while the new shared GPU's
    reservation pod is still being created, and the fraction into that GPU waits for that one create (it
    posts none of its own) and is bound once the create is answered."""
    from shoal.core.plan import Reserve

    ops = [Reserve(node="n1", gpu_group="g1", gpu_index=0),
           Bind(pod="ns/p0", pod_uid="uid-0", node="n1", gpu_groups=("g1",), fraction="0.50",
                received_resource_type="Fraction"),
           Bind(pod="ns/p1", pod_uid="uid-1", node="n1")]
    inflight = FakeInFlight({f"uid-{i}": InFlightBind(pod=f"ns/p{i}", pod_uid=f"uid-{i}", node="n1",
                                                      plan_id="plan-1", expires_at=1e12) for i in range(2)})
    kube, bus = HeldReservationKube(pods(2)), GatedBus()
    bus.gate.set()
    work = asyncio.ensure_future(binder(kube, inflight, bus, parallel=8).on_plan(plan_of(ops), DELIVERY))
    for _ in range(50):
        await asyncio.sleep(0)
    assert kube.bound == {"ns/p1"}, "the whole-GPU bind went out while the reservation pod was being created"
    assert kube.reservation_posts == 1, "the fraction waits for the Reserve's create, it posts none of its own"
    kube.gate.set()
    await work
    assert kube.bound == {"ns/p0", "ns/p1"}
    assert kube.reservation_posts == 1
    assert sum(1 for key in kube.pods if key.startswith("kai-resource-reservation/")) == 1


async def test_a_cached_read_the_watch_cache_cannot_serve_is_read_again_from_etcd():
    class Lagging(FakeKube):
        async def get(self, resource, name, *, namespace=None, cached=False, **kwargs):
            self.calls.append(("get", resource.plural, f"{namespace}/{name}", cached))
            if cached:
                raise NotFoundError("not in the watch cache yet", status=404)
            return await super().get(resource, name, namespace=namespace)

    kube = Lagging(pods(1))
    b = binder(kube, FakeInFlight({}), GatedBus())
    pod = await b._get(PODS, "ns/p0", cached=True)
    assert pod is not None and pod["metadata"]["uid"] == "uid-0"
    assert [c for c in kube.calls if len(c) == 4] == [("get", "pods", "ns/p0", True), ("get", "pods", "ns/p0", False)]
    assert await b._get(PODS, "ns/gone", cached=True) is None


async def test_a_start_stamp_for_a_podgroup_not_made_yet_is_dropped_quietly_other_missing_writes_are_logged(caplog):
    """A bare pod bound within the podgrouper's wait has no PodGroup yet when the scheduler stamps its start (the
    podgrouper creates it after the bind, with the stamp): that 404 is expected, not news; a condition's is."""
    from shoal.core.plan import Annotate, SetCorePods

    caplog.set_level("INFO", logger="services.binder")
    kube = FakeKube({})

    async def missing(resource, name, body, **kwargs):
        kube.calls.append(("patch", resource.plural, kwargs.get("subresource")))
        raise NotFoundError(f"{resource.plural} {name} not found")

    kube.patch = missing
    bus = GatedBus()
    bus.gate.set()
    b = binder(kube, FakeInFlight({}), bus)
    plan = PlanIssued(meta=new_meta("planner", revision=1, id="plan-1"), shard="pool", plan_id="plan-1", revision=1,
                      ops=(Annotate(pod_group="ns/pg-solo-uid", key="kai.scheduler/last-start-timestamp",
                                    value="2026-12-06T05:00:00Z"),))
    await asyncio.wait_for(b.on_plan(plan, DELIVERY), 10)
    assert kube.calls == [("patch", "podgroups", None)]
    assert not [r for r in caplog.records if r.getMessage() == "status_write_skipped"]
    plan = PlanIssued(meta=new_meta("planner", revision=2, id="plan-2"), shard="pool", plan_id="plan-2", revision=2,
                      ops=(SetCorePods(pod_group="ns/pg-solo-uid", pods=("p",)),))
    await asyncio.wait_for(b.on_plan(plan, DELIVERY), 10)
    assert len([r for r in caplog.records if r.getMessage() == "status_write_skipped"]) == 1


def test_a_plans_delivery_time_is_read_from_its_header():
    from services.binder.handlers import _since

    made = new_meta("planner").produced_at
    assert 0 <= _since(made) < 5
    assert _since("yesterday") is None

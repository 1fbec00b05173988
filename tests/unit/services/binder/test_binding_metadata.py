"""A fraction's labels and annotations ride on its Binding where the apiserver copies them, with one read-back
(the probe) to find out; elsewhere, and with SHOAL_FRACTION_METADATA=patch, they are patched before the binding.
The fake apiserver below applies a Binding as kube-apiserver does: annotations always, labels only when it
`copies_labels` (v1.35+, PodTopologyLabelsAdmission)."""

from __future__ import annotations

import asyncio

from services.binder import kubeobjects as ko
from shoal.core.kai_labels import GPU_GROUP_LABEL, RECEIVED_TYPE
from shoal.core.plan import Bind
from shoal.errors import PermanentError
from shoal.messages.snapshot import InFlightBind
from tests.unit.services.binder.test_binder_plan import (
    DELIVERY,
    FakeInFlight,
    GatedBus,
    ReservingKube,
    binder,
    plan_of,
    pods,
)


class Apiserver(ReservingKube):
    """Bindings and merge patches change the stored pod; `log` is the order of pod writes and reads."""

    def __init__(self, n: int, *, copies_labels: bool):
        super().__init__(pods(n))
        self.copies_labels = copies_labels
        self.log: list[tuple[str, str]] = []  # (what, pod name)
        self.reject: set[str] = set()  # pods whose binding is refused
        self.hold: dict[str, asyncio.Event] = {}  # pods whose binding waits for the event

    async def get(self, resource, name, *, namespace=None, cached=False, **kwargs):
        if resource.plural == "pods" and not cached and namespace == "ns":
            self.log.append(("read", name))
        return await super().get(resource, name, namespace=namespace, **kwargs)

    async def create(self, resource, body, *, namespace=None, name=None, subresource=None, **kwargs):
        if subresource == "binding":
            if name in self.hold:
                await self.hold[name].wait()
            if name in self.reject:
                raise PermanentError("admission webhook denied the binding", status=403)
            meta = self.pods[f"{namespace}/{name}"]["metadata"]
            meta.setdefault("annotations", {}).update(body["metadata"].get("annotations") or {})
            if self.copies_labels:
                meta.setdefault("labels", {}).update(body["metadata"].get("labels") or {})
            self.log.append(("bind", name))
        return await super().create(resource, body, namespace=namespace, name=name, subresource=subresource)

    async def patch(self, resource, name, body, *, namespace=None, **kwargs):
        if resource.plural == "pods" and namespace == "ns" and "metadata" in body:
            meta = self.pods[f"{namespace}/{name}"]["metadata"]
            for field in ("labels", "annotations"):
                meta.setdefault(field, {}).update(body["metadata"].get(field) or {})
            self.log.append(("patch", name))
        return await super().patch(resource, name, body, namespace=namespace, **kwargs)


def fractions(n: int, plan_id: str = "plan-1", first: int = 0) -> tuple[list[Bind], dict[str, InFlightBind]]:
    ops = [Bind(pod=f"ns/p{i}", pod_uid=f"uid-{i}", node="n1", gpu_groups=(f"g{i // 2}",), fraction="0.50",
                received_resource_type="Fraction") for i in range(first, first + n)]
    leases = {op.pod_uid: InFlightBind(pod=op.pod, pod_uid=op.pod_uid, node="n1", plan_id=plan_id, expires_at=1e12)
              for op in ops}
    return ops, leases


def labelled(kube: Apiserver, name: str) -> bool:
    meta = kube.pods[f"ns/{name}"]["metadata"]
    return (meta.get("labels") or {}).get(GPU_GROUP_LABEL) is not None \
        and (meta.get("labels") or {}).get(ko.SHARED_LABEL) == "true" \
        and (meta.get("annotations") or {}).get(RECEIVED_TYPE) == "Fraction"


def setup(kube: Apiserver, n: int, **kwargs):
    ops, leases = fractions(n)
    bus = GatedBus()
    bus.gate.set()
    return ops, binder(kube, FakeInFlight(leases), bus, parallel=8, **kwargs)


async def test_where_the_apiserver_copies_binding_labels_a_fraction_is_bound_with_no_pod_patch():
    kube = Apiserver(4, copies_labels=True)
    ops, b = setup(kube, 4)
    await b.on_plan(plan_of(ops), DELIVERY)
    assert kube.bound == {f"ns/p{i}" for i in range(4)}
    assert all(labelled(kube, f"p{i}") for i in range(4))
    assert [w for w in kube.log if w[0] == "patch"] == [], "no pod patch: the labels came with the bindings"
    assert len([w for w in kube.log if w[0] == "read"]) == 1, "one read-back, for the first fraction only"
    for binding in kube.bindings:
        assert binding["metadata"]["labels"][ko.SHARED_LABEL] == "true"
    # a later plan's fractions: no read-back any more
    more, leases = fractions(2, "plan-2", first=4)
    kube.pods.update({f"ns/p{i}": {"metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"uid-{i}"}, "spec": {}}
                      for i in (4, 5)})
    b.inflight.entries.update(leases)
    kube.log.clear()
    await b.on_plan(plan_of(more, "plan-2"), DELIVERY)
    assert [w[0] for w in kube.log] == ["bind", "bind"] and labelled(kube, "p4") and labelled(kube, "p5")


async def test_where_it_does_not_the_first_fraction_is_patched_after_and_every_later_one_before_its_binding():
    kube = Apiserver(4, copies_labels=False)
    ops, b = setup(kube, 4)
    await b.on_plan(plan_of(ops), DELIVERY)
    assert kube.bound == {f"ns/p{i}" for i in range(4)}
    assert all(labelled(kube, f"p{i}") for i in range(4)), "every fraction ends with its labels"
    probe = kube.log[0][1]
    assert kube.log[:3] == [("bind", probe), ("read", probe), ("patch", probe)]
    for name in {f"p{i}" for i in range(4)} - {probe}:
        writes = [w for w, pod in kube.log if pod == name]
        assert writes == ["patch", "bind"], f"{name}: KAI's patch, before the binding"


async def test_fractions_bound_while_the_probe_is_under_way_wait_for_its_answer():
    kube = Apiserver(4, copies_labels=False)
    ops, b = setup(kube, 4)
    kube.hold["p0"] = asyncio.Event()
    work = asyncio.ensure_future(b.on_plan(plan_of(ops), DELIVERY))
    for _ in range(100):
        await asyncio.sleep(0)
    assert kube.bound == set() and kube.log == [], "the others wait for the probe's answer"
    kube.hold["p0"].set()
    await work
    assert all(labelled(kube, f"p{i}") for i in range(4))
    assert kube.log[:3] == [("bind", "p0"), ("read", "p0"), ("patch", "p0")]
    for name in ("p1", "p2", "p3"):
        assert [w for w, pod in kube.log if pod == name] == ["patch", "bind"]


async def test_a_probe_whose_binding_fails_answers_nothing_and_the_next_fraction_probes_again():
    kube = Apiserver(4, copies_labels=True)
    ops, b = setup(kube, 4)
    kube.reject.add("p0")
    kube.hold["p0"] = asyncio.Event()
    work = asyncio.ensure_future(b.on_plan(plan_of(ops[:2]), DELIVERY))
    for _ in range(100):
        await asyncio.sleep(0)
    kube.hold["p0"].set()
    await work
    assert kube.bound == {"ns/p1"} and labelled(kube, "p1")
    assert ("patch", "p1") in kube.log, "the fraction that waited on the failed probe took KAI's patch"
    kube.log.clear()
    later, leases = fractions(2, "plan-2", first=2)
    b.inflight.entries.update(leases)
    await b.on_plan(plan_of(later, "plan-2"), DELIVERY)
    assert {"ns/p2", "ns/p3"} <= kube.bound and labelled(kube, "p2") and labelled(kube, "p3")
    assert len([w for w in kube.log if w[0] == "read"]) == 1, "a new probe: one read-back"
    assert [w for w in kube.log if w[0] == "patch"] == []


async def test_with_the_patch_setting_every_fraction_is_patched_before_its_binding():
    kube = Apiserver(2, copies_labels=True)
    ops, b = setup(kube, 2, fraction_metadata="patch")
    await b.on_plan(plan_of(ops), DELIVERY)
    for name in ("p0", "p1"):
        assert [w for w, pod in kube.log if pod == name] == ["patch", "bind"]
        assert labelled(kube, name)
    assert all("labels" not in binding["metadata"] for binding in kube.bindings)


def test_a_binding_carries_the_metadata_and_the_pod_group_annotation():
    body = ko.binding("ns/p", "n1", "ns/pg", {"labels": {"a": "1"}, "annotations": {"b": "2"}})
    assert body["metadata"] == {"name": "p", "namespace": "ns", "labels": {"a": "1"},
                                "annotations": {"b": "2", ko.POD_GROUP_ANNOTATION: "pg"}}
    assert ko.binding("ns/p", "n1")["metadata"] == {"name": "p", "namespace": "ns"}

"""The binder's probe of whether a Binding's labels reach the pod, on real apiservers: the suite's (v1.36: it copies
them, PodTopologyLabelsAdmission being on by default) and a second kube-apiserver of the same binary and flags on the
same etcd with that feature gate off (it copies the annotations only, as before v1.35)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from services.binder import kubeobjects as ko
from shoal.adapters import kube as k
from shoal.core.kai_labels import GPU_GROUP_LABEL, RECEIVED_TYPE, RESERVE_GPU_ANNOTATION
from shoal.core.plan import Bind
from shoal.devstack import components
from shoal.devstack.pki import Pki, write_kubeconfig
from shoal.devstack.procs import free_port, start_process, stop_process
from shoal.messages.snapshot import InFlightBind
from shoal.settings import KubeSettings
from tests.unit.services.binder.test_binder_plan import DELIVERY, FakeInFlight, GatedBus, binder, plan_of

pytestmark = pytest.mark.stack

GATE_OFF = "kube-apiserver-gate-off"


@pytest.fixture(scope="module")
def gate_off_kubeconfig(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    state = tmp_path_factory.mktemp("gate-off")
    pki = Pki(Path(stack.state_dir) / "pki")
    port = free_port()
    spec = components.apiserver(state, pki, stack.ports["etcd"], port)
    spec = dataclasses.replace(spec, name=GATE_OFF,
                               argv=[*spec.argv, "--feature-gates=PodTopologyLabelsAdmission=false"])
    start_process(state, spec, tie_to_parent=True)
    try:
        yield str(write_kubeconfig(state / "kubeconfig", f"https://127.0.0.1:{port}", pki))
    finally:
        stop_process(state, GATE_OFF)


class Recording(k.Kube):
    """The pod writes of the namespace under test, in order: ("bind" | "patch", pod name)."""

    writes: list[tuple[str, str]]

    async def create(self, resource, body, *, namespace=None, name=None, subresource=None, **kwargs):
        out = await super().create(resource, body, namespace=namespace, name=name, subresource=subresource, **kwargs)
        if subresource == "binding":
            self.writes.append(("bind", name or ""))
        return out

    async def patch(self, resource, name, body, **kwargs):
        out = await super().patch(resource, name, body, **kwargs)
        if resource.plural == "pods" and "metadata" in body:
            self.writes.append(("patch", name))
        return out


@pytest_asyncio.fixture
async def clients(stack: Any, gate_off_kubeconfig: str) -> AsyncIterator[dict[str, Recording]]:
    out = {}
    for which, path in (("copies", stack.kubeconfig), ("gate-off", gate_off_kubeconfig)):
        api = await k.connect_kube(KubeSettings(kubeconfig=path), component="test")
        out[which] = Recording(api)
        out[which].writes = []
    try:
        yield out
    finally:
        for kube in out.values():
            await kube.api.close()


async def bind_two_fractions(kube: Recording, namespace: str):
    """Two halves of one shared GPU (its reservation pod made with its GPU id, as the node agent leaves it), bound
    by one binder in two plans; returns the binder and the bound pods as read back."""
    group = f"g-{namespace}"
    reservation = ko.reservation_pod("ghost", group, namespace, annotations={RESERVE_GPU_ANNOTATION: "GPU-1"})
    await kube.create(k.PODS, reservation, namespace=namespace)
    b = binder(kube, FakeInFlight({}), GatedBus(), parallel=4, reservation_namespace=namespace)
    b.bus.gate.set()
    for i in range(2):
        pod = await kube.create(k.PODS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": namespace, "annotations": {"gpu-fraction": "0.5"}},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "x"}]}}, namespace=namespace)
        uid = pod["metadata"]["uid"]
        op = Bind(pod=f"{namespace}/p{i}", pod_uid=uid, node="ghost", gpu_groups=(group,), fraction="0.50",
                  received_resource_type="Fraction")
        b.inflight.entries[uid] = InFlightBind(pod=op.pod, pod_uid=uid, node="ghost", plan_id=f"plan-{i}",
                                               expires_at=1e12)
        await b.on_plan(plan_of([op], f"plan-{i}"), DELIVERY)
    return b, [await kube.get(k.PODS, f"p{i}", namespace=namespace) for i in range(2)]


def assert_bound_with_metadata(pods: list[dict], namespace: str) -> None:
    for pod in pods:
        assert pod["spec"]["nodeName"] == "ghost"
        assert pod["metadata"]["labels"][GPU_GROUP_LABEL] == f"g-{namespace}"
        assert pod["metadata"]["labels"][ko.SHARED_LABEL] == "true"
        assert pod["metadata"]["annotations"][RECEIVED_TYPE] == "Fraction"


async def test_an_apiserver_that_copies_binding_labels_gets_no_fraction_patch(clients, namespace):
    kube = clients["copies"]
    b, pods = await bind_two_fractions(kube, namespace)
    assert_bound_with_metadata(pods, namespace)
    assert kube.writes == [("bind", "p0"), ("bind", "p1")], "the labels came with the bindings"
    assert b._labels_copied is not None and b._labels_copied.result() is True


async def test_one_that_does_not_gets_the_labels_patched_after_the_probe_and_before_every_later_binding(
        clients, namespace):
    kube = clients["gate-off"]
    b, pods = await bind_two_fractions(kube, namespace)
    assert_bound_with_metadata(pods, namespace)
    assert kube.writes == [("bind", "p0"), ("patch", "p0"), ("patch", "p1"), ("bind", "p1")]
    assert b._labels_copied is not None and b._labels_copied.result() is False

"""KAI issue #2075 on the real stack: a pod whose binding the apiserver always rejects must not starve the pods
behind it. A ValidatingAdmissionPolicy on `pods/binding` (as the Kyverno policy of the issue) denies every binding
of the `doomed-` pods in this test's namespace; the doomed pod, older than the other at the same priority, comes
first in job order and would take the node's only GPU every cycle. After its first failed bind the binder counts it on the PodGroup, the planner
backs the job off (BindBackoff condition, `shoal explain`) and the train pod behind it is bound.
"""

from __future__ import annotations

import contextlib

from e2e_helpers import eventually
from scenario_helpers import annotations_of, create, node_of, pod, podgroup, pods, scheduling_condition
from test_explain_e2e import cli_env, shoal_cli  # noqa: F401  (cli_env is a fixture)

from shoal.adapters.kube import PODS, Resource
from shoal.errors import ShoalError

POLICIES = Resource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies",
                    "ValidatingAdmissionPolicy", namespaced=False)
POLICY_BINDINGS = Resource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
                           "ValidatingAdmissionPolicyBinding", namespaced=False)
DENIED = "bindings of doomed pods are denied by policy"


def policy(name: str, namespace: str) -> tuple[dict, dict]:
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/binding"]}
    selector = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    vap = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
           "metadata": {"name": name},
           "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [rule]},
                    "validations": [{"expression": "!object.metadata.name.startsWith('doomed')",
                                     "message": DENIED}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name},
               "spec": {"policyName": name, "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": selector}}}
    return vap, binding


class Probe:
    """Whether the policy is in force yet: each try binds a fresh unmanaged `doomed-probe-<n>` pod (CPU only,
    schedulerName `nobody`); a try the policy rejects means it is loaded."""

    def __init__(self, kube, namespace: str, queue: str, pool: str, node: str) -> None:
        self.kube, self.namespace, self.queue, self.pool, self.node = kube, namespace, queue, pool, node
        self.tries = 0

    async def denied(self) -> bool:
        self.tries += 1
        name = f"doomed-probe-{self.tries}"
        probe = pod(self.namespace, name, self.queue, self.pool, gpus=0)
        probe["spec"]["schedulerName"] = "nobody"  # not Shoal's: only the probe binds it
        await create(self.kube, probe)
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}}
        try:
            await self.kube.create(PODS, body, namespace=self.namespace, name=name, subresource="binding")
        except ShoalError as exc:
            assert DENIED in str(exc), exc
            return True
        finally:
            await self.kube.delete(PODS, name, namespace=self.namespace, body={"gracePeriodSeconds": 0})
        return False


async def test_a_pod_whose_bind_always_fails_backs_off_and_the_next_pod_is_bound(
        shoal, stack, kube, namespace, node_pool, gpu_nodes, queue, cli_env):  # noqa: F811
    (node,) = await gpu_nodes(1, gpus=1)
    name = f"deny-doomed-binds-{namespace}"
    vap, binding = policy(name, namespace)
    await kube.create(POLICIES, vap)
    await kube.create(POLICY_BINDINGS, binding)
    try:
        # a new policy takes a moment to load: wait until it rejects bindings
        await eventually(Probe(kube, namespace, queue, node_pool, node).denied, timeout_s=60, interval_s=1,
                         what="the ValidatingAdmissionPolicy to deny bindings of doomed pods")

        await create(kube, podgroup(namespace, "doomed", queue, node_pool),
                     pod(namespace, "doomed-0", queue, node_pool, group="doomed"))
        cond = await scheduling_condition(kube, namespace, "doomed", timeout_s=90, starts_with="BindBackoff:")
        assert "Binding failed" in cond["message"] and DENIED in cond["message"], cond
        assert "is planned again after" in cond["message"], cond
        failures = int((await annotations_of(kube, namespace, "doomed"))["shoal.io/bind-failures"])
        assert failures >= 1
        code, out, err = await shoal_cli("explain", f"{namespace}/doomed-0")
        assert code == 0, err
        assert "BindBackoff: Binding failed" in out and "backs off" in out, out

        # the pod behind it is bound while the doomed job backs off (without the back-off the older job is
        # planned first onto the only GPU every cycle and this pod waits for ever)
        await create(kube, podgroup(namespace, "other", queue, node_pool),
                     pod(namespace, "other-0", queue, node_pool, group="other"))

        async def other_bound() -> str | None:
            now = await pods(kube, namespace)
            return node_of(now["other-0"])

        assert await eventually(other_bound, timeout_s=90, what="the train pod behind the doomed one to be bound") \
            == node
        assert node_of((await pods(kube, namespace))["doomed-0"]) is None
    finally:
        for resource, obj in ((POLICY_BINDINGS, binding), (POLICIES, vap)):
            with contextlib.suppress(ShoalError):
                await kube.delete(resource, obj["metadata"]["name"])

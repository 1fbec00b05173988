"""Node predicates, node scores and fit-error aggregation."""

from __future__ import annotations

from builders import cluster, job, node, pod, queue, schedule

from shoal.core.model import NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration


def _one(pod_kw=None, nodes=None, **job_kw):
    pods = [pod("x-0", **(pod_kw or {}))]
    snap = cluster(nodes=nodes, queues=[queue("q")], jobs=[job("x", pods=pods, **job_kw)])
    return schedule(snap)


def test_node_selector_and_affinity_operators():
    nodes = [node("a", labels={"zone": "z1", "rank": "3"}), node("b", labels={"zone": "z2", "rank": "7"})]
    assert _one({"gpus": 1, "node_selector": {"zone": "z2"}}, nodes).bound() == {"x-0": "b"}

    def aff(op, *values):
        term = NodeSelectorTerm(
            match_expressions=(NodeSelectorRequirement(key="rank", operator=op, values=values),)
        )
        return _one({"gpus": 1, "affinity_terms": (term,)}, nodes).bound()

    assert aff("In", "3") == {"x-0": "a"}
    assert aff("NotIn", "3") == {"x-0": "b"}
    assert aff("Gt", "5") == {"x-0": "b"}
    assert aff("Lt", "5") == {"x-0": "a"}
    assert aff("Exists") == {"x-0": "a"}  # both match; binpack tie -> name
    assert aff("DoesNotExist") == {}


def test_selector_mismatch_is_reported():
    r = _one({"gpus": 1, "node_selector": {"zone": "nowhere"}}, [node("a"), node("b")])
    (ev,) = r.pod_events("x-0")
    assert "2 node(s) didn't match Pod's node affinity/selector" in ev.message


def test_taints_and_tolerations():
    tainted = [node("a", taints=(Taint(key="gpu", value="yes", effect="NoSchedule"),))]
    r = _one({"gpus": 1}, tainted)
    assert r.bound() == {}
    assert "1 node(s) had untolerated taint {gpu: yes}" in r.pod_events("x-0")[0].message
    ok = _one({"gpus": 1, "tolerations": (Toleration(key="gpu", operator="Equal", value="yes"),)}, tainted)
    assert ok.bound() == {"x-0": "a"}
    assert _one({"gpus": 1, "tolerations": (Toleration(operator="Exists"),)}, tainted).bound() == {"x-0": "a"}
    soft = [node("a", taints=(Taint(key="gpu", effect="PreferNoSchedule"),))]
    assert _one({"gpus": 1}, soft).bound() == {"x-0": "a"}


def test_not_ready_and_cordoned_nodes_are_skipped():
    nodes = [node("a", ready=False), node("b", unschedulable=True), node("c", gpus=1)]
    assert _one({"gpus": 1}, nodes).bound() == {"x-0": "c"}
    r = _one({"gpus": 2}, nodes)
    msg = r.pod_events("x-0")[0].message
    assert msg == (
        "Resources were not found for pod ns/x-0 due to: no nodes with enough resources were found: "
        "1 node(s) didn't have enough resources: GPUs, 1 node(s) were not ready, "
        "1 node(s) were unschedulable."
    )


def test_cpu_memory_and_pod_slots_predicates():
    assert (
        _one({"cpu": 9000}, [node("a", cpu=8000)])
        .pod_events("x-0")[0]
        .message.endswith("1 node(s) didn't have enough resources: CPU cores.")
    )
    assert (
        _one({"memory": 10}, [node("a", memory=5)])
        .pod_events("x-0")[0]
        .message.endswith("1 node(s) didn't have enough resources: memory.")
    )
    assert (
        _one({"cpu": 1}, [node("a", pods=0)])
        .pod_events("x-0")[0]
        .message.endswith("1 node(s) didn't have enough resources: pods.")
    )


def test_fraction_needs_two_pod_slots_for_a_new_group():
    assert _one({"fraction": 0.5}, [node("a", pods=1)]).bound() == {}
    assert _one({"fraction": 0.5}, [node("a", pods=2)]).bound() == {"x-0": "a"}


def test_gpu_memory_request_needs_synced_node_memory():
    r = _one({"gpu_memory": 1000}, [node("a", gpu_memory=None)])
    assert "node is not a gpu node or the gpu memory count on the node was not synced yet" in (
        r.pod_events("x-0")[0].message
    )
    assert _one({"gpu_memory": 1000}, [node("a")]).bound() == {"x-0": "a"}
    too_big = _one({"gpu_memory": 50_000}, [node("a")])
    assert "didn't have enough resources: GPU memory" in too_big.pod_events("x-0")[0].message


def test_fractions_never_on_mig_nodes():
    r = _one({"fraction": 0.5}, [node("a", mig_enabled=True), node("b")])
    assert r.bound() == {"x-0": "b"}


def test_nominated_node_wins():
    nodes = [node("a", gpus=8), node("b", gpus=8)]
    assert _one({"gpus": 1, "nominated_node": "b"}, nodes).bound() == {"x-0": "b"}


def test_pipelined_onto_releasing_resources_when_idle_is_short():
    releasing = job("old", pods=[pod("old-0", gpus=4, node_name="a", deleting=True)])
    new = job("new", gpus=2, created=3)
    snap = cluster(nodes=[node("a", gpus=4)], queues=[queue("q")], jobs=[releasing, new])
    r = schedule(snap)
    assert r.bound() == {} and r.pipelined() == {"new-0": "a"}
    assert r.plan.of(type(r.plan.ops[0]))[0].message == "Pod ns/new-0 was pipelined to node a"


def test_availability_beats_binpack():
    releasing = job("old", pods=[pod("old-0", gpus=7, node_name="a", deleting=True)])
    new = job("new", gpus=2, created=3)
    snap = cluster(nodes=[node("a", gpus=8), node("b", gpus=8)], queues=[queue("q")], jobs=[releasing, new])
    assert schedule(snap).bound() == {"new-0": "b"}


def test_gang_pipelined_below_min_turns_whole_job_pipelined():
    releasing = job("old", pods=[pod("old-0", gpus=2, node_name="b", deleting=True)])
    gang = job("g", pods=2, gpus=2, min_member=2, created=3)
    snap = cluster(nodes=[node("a", gpus=2), node("b", gpus=2)], queues=[queue("q")], jobs=[releasing, gang])
    r = schedule(snap)
    assert r.bound() == {}
    assert r.pipelined() == {"g-0": "a", "g-1": "b"}
    assert not [op for op in r.plan.ops if type(op).__name__ == "Annotate"]

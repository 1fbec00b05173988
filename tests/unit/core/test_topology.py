"""Topology-aware placement (reference §6.1; S36, S37) at the core level."""

from __future__ import annotations

from builders import NS, cluster, job, node, queue, schedule

from shoal.core.model import SubGroup, Topology

ZONE, RACK = "topology.kubernetes.io/zone", "topology.kubernetes.io/rack"
TOPO = Topology(name="t", levels=(ZONE, RACK), aliases=("zone", "rack"))


def rack_node(name: str, zone: str, rack: str, gpus: int):
    return node(name, gpus=gpus, labels={ZONE: zone, RACK: rack})


def with_topologies(snap, topologies=(TOPO,)):
    fields = {f: getattr(snap, f) for f in snap.__struct_fields__}
    return snap.__class__(**{**fields, "topologies": tuple(topologies)})


def docs_cluster():
    """Zone A: racks of 2, 1, 1, 1 GPUs; zone B: racks of 2, 2, 2 (one node per rack)."""
    nodes = [rack_node("a1", "A", "A1", 2), rack_node("a2", "A", "A2", 1), rack_node("a3", "A", "A3", 1),
             rack_node("a4", "A", "A4", 1), rack_node("b1", "B", "B1", 2), rack_node("b2", "B", "B2", 2),
             rack_node("b3", "B", "B3", 2)]
    return nodes


def gang(**kw):
    return job("g", queue="q", pods=3, gpus=1, min_member=3, topology="t", **kw)


def test_s37_required_zone_preferred_rack_packs_into_the_fuller_zone():
    snap = with_topologies(cluster(nodes=docs_cluster(), queues=[queue("q")],
                                   jobs=[gang(required_level=ZONE, preferred_level=RACK)]))
    bound = schedule(snap).bound()
    assert sorted(bound.values()) == ["a1", "a1", "a2"]


def test_levels_can_be_named_by_alias():
    snap = with_topologies(cluster(nodes=docs_cluster(), queues=[queue("q")],
                                   jobs=[gang(required_level="zone", preferred_level="rack")]))
    assert sorted(schedule(snap).bound().values()) == ["a1", "a1", "a2"]


def test_s36_required_rack_that_cannot_hold_the_gang():
    nodes = [rack_node("r1", "A", "R1", 2), rack_node("r2", "A", "R2", 2)]
    snap = with_topologies(cluster(nodes=nodes, queues=[queue("q")], jobs=[gang(required_level=RACK)]))
    r = schedule(snap)
    assert r.bound() == {}
    assert f"topology t, requirement {RACK} couldn't be satisfied for job {NS}/g" in r.condition("g").message
    assert r.condition("g").message.endswith(f"not enough resources in {ZONE}=A to allocate the job.")


def test_required_rack_that_fits_keeps_the_gang_in_one_rack():
    nodes = [rack_node("r1a", "A", "R1", 2), rack_node("r2a", "A", "R2", 2), rack_node("r2b", "A", "R2", 2)]
    snap = with_topologies(cluster(nodes=nodes, queues=[queue("q")], jobs=[gang(required_level=RACK)]))
    assert set(schedule(snap).bound().values()) <= {"r2a", "r2b"}


def test_s37_missing_topology():
    snap = cluster(nodes=docs_cluster(), queues=[queue("q")], jobs=[gang(required_level=ZONE)])
    r = schedule(snap)
    assert r.bound() == {}
    assert "Requested topology t does not exist" in r.condition("g").message


def test_s37_unknown_level_is_a_configuration_error():
    snap = with_topologies(cluster(nodes=docs_cluster(), queues=[queue("q")], jobs=[gang(required_level="row")]))
    r = schedule(snap)
    assert r.bound() == {}
    assert ("topology constraint error: workload specified 'row' as the required topology constraint level, "
            "but the topology tree 't' does not contain a level with this name") in r.condition("g").message


def test_preferred_only_falls_back_to_the_whole_cluster():
    nodes = [rack_node("r1", "A", "R1", 1), rack_node("r2", "B", "R2", 1), rack_node("r3", "C", "R3", 1)]
    snap = with_topologies(cluster(nodes=nodes, queues=[queue("q")], jobs=[gang(preferred_level=RACK)]))
    assert sorted(schedule(snap).bound().values()) == ["r1", "r2", "r3"]


def test_subgroup_constraint_applies_when_the_job_has_none():
    sub = (SubGroup(name="w", min_member=3, topology="t", required_level=RACK),)
    nodes = [rack_node("r1", "A", "R1", 2), rack_node("r2", "A", "R2", 2)]
    snap = with_topologies(cluster(nodes=nodes, queues=[queue("q")],
                                   jobs=[job("g", queue="q", pods=[{"name": f"g-{i}", "gpus": 1, "cpu": 0,
                                                                    "memory": 0, "node_name": None, "fraction": None,
                                                                    "gpu_memory": None, "devices": 1, "subgroup": "w"}
                                                                   for i in range(3)],
                                             min_member=0, subgroups=sub)]))
    r = schedule(snap)
    assert r.bound() == {}
    assert "couldn't be satisfied" in r.condition("g").message


def test_preemptor_with_a_required_rack_is_placed_inside_one_rack():
    # r1 (rack R1, 2 GPUs) and r2 (rack R2, 2 GPUs) full of train pods; a build gang of 2 requiring a rack
    nodes = [rack_node("r1", "A", "R1", 2), rack_node("r2", "A", "R2", 2)]
    trains = [job(f"t{i}", queue="q", pods=1, gpus=1, running_on=[("r1", "r2")[i % 2]], created=i) for i in range(4)]
    snap = with_topologies(cluster(nodes=nodes, queues=[queue("q", gpu=(2, -1))],
                                   jobs=trains + [job("g", queue="q", pods=2, gpus=1, min_member=2, topology="t",
                                                      required_level=RACK, priority_class="build", created=10)]))
    r = schedule(snap)
    placed = set(r.pipelined().values()) | set(r.bound().values())
    assert len(placed) == 1  # both pods in one rack
    from shoal.core.plan import Evict

    assert len(r.plan.of(Evict)) == 2


def _pods(subgroup: str, n: int) -> list[dict]:
    return [{"name": f"{subgroup}-{i}", "gpus": 1, "cpu": 0, "memory": 0, "node_name": None, "fraction": None,
             "gpu_memory": None, "devices": 1, "subgroup": subgroup} for i in range(n)]


def _disaggregated(nodes, **job_constraint):
    """Grove's layout: prefill and decode leaves, each requiring a rack, inside a job that requires a zone."""
    subs = (SubGroup(name="decode", min_member=2, topology="t", required_level=RACK),
            SubGroup(name="prefill", min_member=2, topology="t", required_level=RACK))
    return with_topologies(cluster(nodes=nodes, queues=[queue("q")],
                                   jobs=[job("g", queue="q", pods=_pods("prefill", 2) + _pods("decode", 2),
                                             min_member=4, subgroups=subs, topology="t", **job_constraint)]))


def test_each_subgroup_gets_its_own_rack_inside_the_jobs_zone():
    # bin-packing alone would put prefill + one decode pod on a1 and split decode across racks
    nodes = [rack_node("a1", "A", "A1", 3), rack_node("a2", "A", "A2", 3), rack_node("b1", "B", "B1", 8)]
    bound = schedule(_disaggregated(nodes, required_level=ZONE)).bound()
    # subgroups are placed in name order: decode takes the first rack (ties by name), prefill the other
    assert bound == {"decode-0": "a1", "decode-1": "a1", "prefill-0": "a2", "prefill-1": "a2"}, bound


def test_a_subgroup_without_a_domain_inside_the_jobs_names_the_subgroup():
    # decode (placed first) takes rack A1; no rack is left that holds both prefill pods
    nodes = [rack_node("a1", "A", "A1", 3), rack_node("a2", "A", "A2", 1), rack_node("a3", "A", "A3", 1)]
    r = schedule(_disaggregated(nodes, required_level=ZONE))
    assert r.bound() == {}
    message = r.condition("g").message
    assert f"topology t, requirement {RACK} couldn't be satisfied for job {NS}/g, subgroup prefill" in message, message

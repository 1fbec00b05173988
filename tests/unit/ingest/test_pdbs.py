"""Which pods a PodDisruptionBudget protects from eviction now (SPEC §2.2)."""

from shoal.core.ingest import snapshot_from_objects
from shoal.core.ingest.pdbs import blocked_pod_keys


def pdb(namespace, selector, allowed):
    out = {"kind": "PodDisruptionBudget", "metadata": {"name": "b", "namespace": namespace}, "spec": {}}
    if selector is not None:
        out["spec"]["selector"] = selector
    if allowed is not None:
        out["status"] = {"disruptionsAllowed": allowed}
    return out


PODS = [("ns/a", "ns", {"app": "x", "tier": "db"}), ("ns/b", "ns", {"app": "y"}), ("other/c", "other", {"app": "x"})]


def test_exhausted_budget_blocks_the_pods_it_selects_in_its_namespace():
    assert blocked_pod_keys([pdb("ns", {"matchLabels": {"app": "x"}}, 0)], PODS) == {"ns/a"}


def test_a_budget_with_disruptions_left_blocks_nothing():
    assert blocked_pod_keys([pdb("ns", {"matchLabels": {"app": "x"}}, 1)], PODS) == set()


def test_uncomputed_status_blocks_like_the_eviction_api():
    assert blocked_pod_keys([pdb("ns", {"matchLabels": {"app": "y"}}, None)], PODS) == {"ns/b"}


def test_selector_semantics():
    exprs = {"matchExpressions": [{"key": "tier", "operator": "Exists"},
                                  {"key": "app", "operator": "In", "values": ["x", "z"]}]}
    assert blocked_pod_keys([pdb("ns", exprs, 0)], PODS) == {"ns/a"}
    assert blocked_pod_keys([pdb("ns", {}, 0)], PODS) == {"ns/a", "ns/b"}  # empty selector: every pod
    assert blocked_pod_keys([pdb("ns", None, 0)], PODS) == set()  # no selector: none
    not_in = {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}
    assert blocked_pod_keys([pdb("ns", not_in, 0)], PODS) == {"ns/b"}


def test_ingest_marks_only_running_pods():
    objs = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "run", "namespace": "ns", "labels": {"app": "x"}},
         "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wait", "namespace": "ns", "labels": {"app": "x"}},
         "spec": {"containers": []}},
        pdb("ns", {"matchLabels": {"app": "x"}}, 0),
    ]
    snap = snapshot_from_objects(objs, now="2026-01-01T00:00:00Z").snapshot
    blocked = {p.name: p.eviction_blocked for p in snap.pods}
    assert blocked == {"run": True, "wait": False}

"""SPEC §8: bad input never crashes ingest — any junk becomes a Problem or a per-pod reason."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.core.ingest import expand_workloads, snapshot_from_objects

NOW = "2026-01-01T00:00:00Z"

VALID = [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.memory": "40960"}},
     "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
     "status": {"allocatable": {"cpu": "8", "memory": "1Gi", "nvidia.com/gpu": "2"},
                "conditions": [{"type": "Ready", "status": "True"}]}},
    {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
     "spec": {"parentQueue": "root", "priority": 100, "preemptMinRuntime": "1m",
              "resources": {"gpu": {"quota": 1, "limit": 2, "overQuotaWeight": 1}}}},
    {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg", "namespace": "ns",
     "annotations": {"kai.scheduler/last-start-timestamp": NOW}},
     "spec": {"minMember": 1, "queue": "q", "preemptionDelay": "2m", "subGroups": [{"name": "a", "minMember": 1}],
              "topologyConstraint": {"topology": "t"}}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "labels": {"kai.scheduler/queue": "q"},
     "annotations": {"gpu-fraction": "0.5"}, "ownerReferences": [{"kind": "Job", "name": "j", "uid": "u", "controller": True}]},
     "spec": {"schedulerName": "kai-scheduler", "containers": [{"resources": {"requests": {"cpu": "1"}}}],
              "initContainers": [{"resources": {"limits": {"memory": "1Gi"}}}], "tolerations": [{"operator": "Exists"}],
              "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                  {"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}}}},
     "status": {"phase": "Pending"}},
    {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns", "uid": "u",
     "annotations": {"kai.scheduler/batch-min-member": "2"}},
     "spec": {"parallelism": 2, "template": {"spec": {"schedulerName": "kai-scheduler", "containers": [{}]}}}},
    {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "t"},
     "spec": {"levels": [{"nodeLabel": "zone"}, {"nodeLabel": "kubernetes.io/hostname"}]}},
    {"apiVersion": "shoal.io/v1alpha1", "kind": "SchedulerConfig",
     "spec": {"placementStrategy": {"gpu": "binpack"}, "usage": {"q": {"gpu": 0.1}}, "actions": ["allocate"]}},
    {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js", "namespace": "ns"},
     "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"parallelism": 1}}}]}},
]

JUNK = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True, allow_infinity=True),
                 st.text(max_size=6), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                 st.sampled_from(["-1", "0.5", "1.5", "abc", "1Gi", "100m", "2m", "1e3", "", "NaN"]))


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _paths(child, (*prefix, i))


def _set(doc, path, junk):
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = junk


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_junk_anywhere_never_raises(data) -> None:
    docs = copy.deepcopy(VALID)
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(docs) - 1))
        paths = [p for p in _paths(docs[index]) if p]
        path = data.draw(st.sampled_from(paths))
        _set(docs[index], path, data.draw(JUNK))
    try:
        docs = docs + expand_workloads(docs)
    except Exception as exc:  # pragma: no cover - the assertion message is the point
        raise AssertionError(f"expand_workloads raised {exc!r}") from exc
    result = snapshot_from_objects(docs, now=NOW)
    for problem in result.problems:
        assert isinstance(problem.message, str) and problem.message


def test_valid_baseline_has_no_problems() -> None:
    docs = copy.deepcopy(VALID)
    result = snapshot_from_objects(docs + expand_workloads(docs), now=NOW)
    assert result.problems == ()
    assert {p.name for p in result.snapshot.pods} >= {"p", "js-w-0-0"}

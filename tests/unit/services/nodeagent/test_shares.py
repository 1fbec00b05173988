from fractions import Fraction

import pytest

from services.nodeagent.shares import ShareError, ShareSpec, gpu_groups, parse_share
from services.nodeagent.translate import pod_view

from .helpers import pod


def test_fraction_static_and_modes():
    spec = parse_share(pod("a", {"gpu-fraction": "0.25"}), 16000, "strict")
    assert isinstance(spec, ShareSpec)
    assert (spec.mem_request_mib, spec.mem_limit_mib) == (4000, 4000)
    assert (spec.compute_request, spec.compute_limit) == (Fraction(1, 4), Fraction(1, 4))
    assert not spec.dynamic
    fair = parse_share(pod("a", {"gpu-fraction": "0.25"}), 16000, "fair")
    assert (fair.compute_request, fair.compute_limit) == (Fraction(1, 4), Fraction(1))


def test_dynamic_fraction_and_memory_limits():
    spec = parse_share(pod("a", {"gpu-fraction": "0.25", "gpu-fraction-limit": "0.8"}), 10000)
    assert (spec.mem_request_mib, spec.mem_limit_mib, spec.dynamic) == (2500, 8000, True)
    mem = parse_share(pod("b", {"gpu-memory": "2000", "gpu-memory-limit": "6000"}), 10000, "strict")
    assert (mem.mem_request_mib, mem.mem_limit_mib) == (2000, 6000)
    assert (mem.compute_request, mem.compute_limit) == (0, 1)
    capped = parse_share(pod("c", {"gpu-memory": "2000", "gpu-memory-limit": "60000"}), 10000)
    assert capped.mem_limit_mib == 10000


@pytest.mark.parametrize(
    "annotations,needle",
    [
        ({"gpu-fraction": "abc"}, "not a number"),
        ({"gpu-fraction": "1.5"}, "must be in (0, 1)"),
        ({"gpu-fraction": "-1"}, "must be in (0, 1)"),
        ({"gpu-fraction": "0.5", "gpu-memory": "10"}, "both"),
        ({"gpu-memory": "0"}, "positive integer"),
        ({"gpu-memory": "2Gi"}, "positive integer"),
        ({"gpu-fraction": "0.5", "gpu-fraction-limit": "0.4"}, "[gpu-fraction, 1]"),
        ({"gpu-memory": "100", "gpu-memory-limit": "50"}, "below"),
    ],
)
def test_malformed_annotations_are_values_not_crashes(annotations, needle):
    got = parse_share(pod("bad", annotations), 10000)
    assert isinstance(got, ShareError)
    assert needle in got.message and got.pod_key == "ns/bad"


def test_groups_single_and_multi_device():
    assert gpu_groups(pod("a", labels={"runai-gpu-group": "g1"})) == ("g1",)
    multi = pod("b", labels={"runai-gpu-group/g2": "g2", "runai-gpu-group/g1": "g1", "other": "x"})
    assert gpu_groups(multi) == ("g1", "g2")


def test_pod_view_from_api_json():
    view = pod_view({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": {"gpu-fraction": "0.5"}},
        "spec": {"nodeName": "n1", "priority": 100,
                 "containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}, {"resources": {}}]},
        "status": {"phase": "Running", "containerStatuses": [{"containerID": "containerd://" + "b" * 64}]},
    })
    assert (view.key, view.node_name, view.whole_gpus, view.priority) == ("ns/p", "n1", 2, 100)
    assert view.container_ids == ("b" * 64,) and view.active

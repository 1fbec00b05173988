"""A node's tick end to end on the fake backend, without I/O."""

from dataclasses import replace

from services.nodeagent.binding import FAKE_DEVICES_ANNOTATION, RESERVE_ANNOTATION
from services.nodeagent.fake_backend import FakeInventory
from services.nodeagent.handlers import AgentConfig, NodeAgent
from services.nodeagent.memory_policy import PolicyConfig
from services.nodeagent.translate import NodeView

from .helpers import pod

RNS = "kai-resource-reservation"
LABELS = {"nvidia.com/gpu.memory": "10000", "nvidia.com/gpu.product": "Fake-T4"}
NODE = NodeView("n1", LABELS, {"nvidia.com/gpu": "2"})


def reservation(name, group, created, uuid=None):
    ann = {RESERVE_ANNOTATION: uuid} if uuid else {}
    return pod(name, ann, {"runai-gpu-group": group}, created=created, ns=RNS)


def fractional(name, group, ann, created="2026-01-01T00:00:05Z"):
    return pod(name, ann, {"runai-gpu-group": group}, created=created)


def apply(pods, result):
    """The cluster after the agent's annotation patches."""
    out = []
    for p in pods:
        extra = {a.key: a.value for a in result.annotate if (a.namespace, a.name) == (p.namespace, p.name)}
        out.append(replace(p, annotations={**p.annotations, **extra}) if extra else p)
    return out


def test_reservations_get_distinct_gpus_and_whole_gpu_pods_count():
    inv = FakeInventory.for_node("n1", LABELS, {"nvidia.com/gpu": "2"})
    agent = NodeAgent("n1", AgentConfig(may_choose_devices=True))
    whole = replace(pod("train", created="2026-01-01T00:00:00Z"), whole_gpus=1)
    pods = [whole, reservation("r1", "g1", "2026-01-01T00:00:01Z"), reservation("r2", "g2", "2026-01-01T00:00:02Z")]
    result = agent.tick(NODE, pods, inv.sample(), 0.0, policy=PolicyConfig())
    got = {(a.name, a.key): a.value for a in result.annotate}
    assert got == {("train", FAKE_DEVICES_ANNOTATION): inv.gpus[0].uuid, ("r1", RESERVE_ANNOTATION): inv.gpus[1].uuid}
    # r2 waits: both GPUs are held; after r1 goes away it gets the freed GPU
    pods = apply(pods, result)
    assert agent.tick(NODE, pods, inv.sample(), 1.0, policy=PolicyConfig()).annotate == []
    restarted = NodeAgent("n1", AgentConfig(may_choose_devices=True))
    assert restarted.tick(NODE, pods, inv.sample(), 2.0, policy=PolicyConfig()).annotate == []
    gone = [p for p in pods if p.name != "r1"]
    later = restarted.tick(NODE, gone, inv.sample(), 3.0, policy=PolicyConfig())
    assert [(a.name, a.value) for a in later.annotate] == [("r2", inv.gpus[1].uuid)]
    stats = {g.uuid: g.holder for g in later.gpus}
    assert stats[inv.gpus[0].uuid] == "ns/train"


def test_over_share_report_then_enforce_kill_and_telemetry():
    inv = FakeInventory.for_node("n1", LABELS, {"nvidia.com/gpu": "2"})
    gpu = inv.gpus[0].uuid
    pods = [reservation("r1", "g1", "t0", gpu), fractional("frac", "g1", {"gpu-fraction": "0.25"})]
    inv.start_process(pid=42, gpu_uuid=gpu, used_mib=4000, start_ticks=9, pod_uid="uid-frac", utilization_percent=30)
    agent = NodeAgent("n1", AgentConfig(may_choose_devices=True))
    enforce = PolicyConfig(policy="enforce", grace_s=5)
    first = agent.tick(NODE, pods, inv.sample(), 0.0, policy=enforce)
    assert [(e.name, e.reason) for e in first.events] == [("frac", "GPUMemoryOverShare")]
    assert first.kills == []
    (stat,) = first.pods
    assert (stat.memory_used_mib, stat.memory_request_mib, stat.over_share_mib, stat.fraction) == (4000, 2500, 1500, 0.25)
    assert first.gpus[0].memory_used_mib == 4000 and first.gpus[0].holder == f"{RNS}/r1"
    later = agent.tick(NODE, pods, inv.sample(), 6.0, policy=enforce)
    assert [(k.pid, k.start_ticks, k.reason) for k in later.kills] == [(42, 9, "GPUMemoryLimitExceeded")]


def test_mig_node_refuses_fractions_once_and_reports_instances():
    labels = {**LABELS, "nvidia.com/mig.strategy": "mixed"}
    inv = FakeInventory.for_node("n1", labels, {"nvidia.com/gpu": "1"})
    node = NodeView("n1", labels, {"nvidia.com/gpu": "1"})
    agent = NodeAgent("n1", AgentConfig(may_choose_devices=True))
    pods = [reservation("r1", "g1", "t0", inv.gpus[0].uuid), fractional("frac", "g1", {"gpu-fraction": "0.5"})]
    first = agent.tick(node, pods, inv.sample(), 0.0, policy=PolicyConfig())
    assert [e.reason for e in first.events] == ["GPUSharingUnsupportedOnMIG"]
    assert first.pods == () and len(first.gpus[0].mig_instances) == 2
    assert agent.tick(node, pods, inv.sample(), 1.0, policy=PolicyConfig()).events == []


def test_swap_node_capacity_and_swap_request_refused():
    labels = {**LABELS, "run.ai/swap-enabled": "true"}
    inv = FakeInventory.for_node("n1", labels, {"nvidia.com/gpu": "1"})
    node = NodeView("n1", labels, {"nvidia.com/gpu": "1"})
    agent = NodeAgent("n1", AgentConfig(time_slicing="strict"))
    pods = [reservation("r1", "g1", "t0", inv.gpus[0].uuid),
            fractional("frac", "g1", {"gpu-fraction": "0.5", "gpu-memory-swap": "true"})]
    got = agent.tick(node, pods, inv.sample(), 0.0, policy=PolicyConfig())
    assert got.gpus[0].capacity_mib == 7952
    assert got.pods[0].memory_request_mib == 3976
    assert [e.reason for e in got.events] == ["GPUMemorySwapNotSupported"]
    assert got.notes and "swap-enabled" in got.notes[0]


def test_invalid_annotation_is_an_event_not_a_crash():
    inv = FakeInventory.for_node("n1", LABELS, {"nvidia.com/gpu": "1"})
    agent = NodeAgent("n1", AgentConfig())
    pods = [reservation("r1", "g1", "t0", inv.gpus[0].uuid), fractional("bad", "g1", {"gpu-fraction": "abc"})]
    got = agent.tick(NODE, pods, inv.sample(), 0.0, policy=PolicyConfig())
    assert [(e.reason, e.name) for e in got.events] == [("InvalidGPUShare", "bad")]


def test_mps_values_written_to_pod_configmap_once_and_compute_plan():
    inv = FakeInventory.for_node("n1", LABELS, {"nvidia.com/gpu": "1"})
    gpu = inv.gpus[0].uuid
    agent = NodeAgent("n1", AgentConfig(mps=True, time_slicing="strict"))
    frac = fractional("frac", "g1", {"gpu-fraction": "0.25", "runai/shared-gpu-configmap": "frac-abc1234-shared-gpu"})
    pods = [reservation("r1", "g1", "t0", gpu), frac]
    inv.start_process(pid=5, gpu_uuid=gpu, used_mib=100, start_ticks=1, pod_uid="uid-frac")
    got = agent.tick(NODE, pods, inv.sample(), 0.0, policy=PolicyConfig())
    (cm,) = got.configmaps
    assert (cm.namespace, cm.name) == ("ns", "frac-abc1234-shared-gpu-0-evar")
    assert cm.data == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2500M"}
    assert got.pods[0].compute_share == 0.25
    agent.configmap_written(cm)
    assert agent.tick(NODE, pods, inv.sample(), 1.0, policy=PolicyConfig()).configmaps == []


def test_real_mode_uses_observed_devices_only():
    inv = FakeInventory.for_node("n1", LABELS, {"nvidia.com/gpu": "2"})
    agent = NodeAgent("n1", AgentConfig(may_choose_devices=False))
    pods = [reservation("r1", "g1", "t0"), reservation("r2", "g2", "t1")]
    got = agent.tick(NODE, pods, inv.sample(), 0.0, policy=PolicyConfig(),
                     observed={f"{RNS}/r2": (inv.gpus[1].uuid,)})
    assert [(a.name, a.value) for a in got.annotate] == [("r2", inv.gpus[1].uuid)]

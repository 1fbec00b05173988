"""The fake device plugin's allocation record: kept on the node, not on the pods."""

import json
from dataclasses import replace

from services.nodeagent.binding import FAKE_DEVICES_ANNOTATION, RESERVE_ANNOTATION
from services.nodeagent.device_record import DeviceRecord
from services.nodeagent.fake_backend import FakeInventory
from services.nodeagent.handlers import AgentConfig, NodeAgent
from services.nodeagent.memory_policy import PolicyConfig
from services.nodeagent.translate import NodeView

from .helpers import pod

LABELS = {"nvidia.com/gpu.memory": "10000", "nvidia.com/gpu.product": "Fake-T4"}
NODE = NodeView("n1", LABELS, {"nvidia.com/gpu": "3"})
RECORDING = AgentConfig(may_choose_devices=True, annotate_devices=False)


def whole(name, created, gpus=1):
    return replace(pod(name, created=created), whole_gpus=gpus)


def reservation(name, created):
    return pod(name, {}, {"runai-gpu-group": f"g-{name}"}, created=created, ns="kai-resource-reservation")


def tick(agent, record, pods, inv, now=0.0):
    result = agent.tick(NODE, pods, inv.sample(), now, policy=PolicyConfig(), recorded=record.of("n1"))
    record.update("n1", result.recorded, live=(p.uid for p in pods if p.active and p.whole_gpus > 0))
    return result


def test_whole_gpu_pods_are_recorded_on_the_node_not_annotated_and_a_restart_moves_nothing(tmp_path):
    inv = FakeInventory.for_node("n1", LABELS, {"nvidia.com/gpu": "3"})
    gpus = [g.uuid for g in inv.gpus]
    record = DeviceRecord(tmp_path)
    pods = [whole("train", "2026-01-01T00:00:00Z", gpus=2), reservation("r1", "2026-01-01T00:00:01Z")]
    first = tick(NodeAgent("n1", RECORDING), record, pods, inv)
    assert [(a.name, a.key) for a in first.annotate] == [("r1", RESERVE_ANNOTATION)]  # only KAI's own
    assert first.recorded == {"uid-train": (gpus[0], gpus[1])}
    on_disk = json.loads((tmp_path / "n1.json").read_text())
    assert on_disk == {"node": "n1", "pods": {"uid-train": [gpus[0], gpus[1]]}}

    # a new process: an earlier pod that is created now must not take the recorded GPUs
    pods = [replace(pods[1], annotations={RESERVE_ANNOTATION: gpus[2]}), pods[0],
            whole("early", "2025-12-31T00:00:00Z")]
    again = DeviceRecord(tmp_path)
    second = tick(NodeAgent("n1", RECORDING), again, pods, inv, 1.0)
    assert second.annotate == [] and second.recorded == {}  # "early" waits: every GPU is held
    holders = {g.uuid: g.holder for g in second.gpus}
    assert holders == {gpus[0]: "ns/train", gpus[1]: "ns/train", gpus[2]: "kai-resource-reservation/r1"}

    # the pod goes: its GPUs are released, given to the waiting pod, and the file follows
    third = tick(NodeAgent("n1", RECORDING), again, [p for p in pods if p.name != "train"], inv, 2.0)
    assert third.recorded == {"uid-early": (gpus[0],)}
    assert json.loads((tmp_path / "n1.json").read_text())["pods"] == {"uid-early": [gpus[0]]}


def test_an_annotation_written_before_is_honoured_and_without_a_directory_the_pod_is_annotated(tmp_path):
    inv = FakeInventory.for_node("n1", LABELS, {"nvidia.com/gpu": "3"})
    gpus = [g.uuid for g in inv.gpus]
    annotated = replace(whole("old", "2026-01-01T00:00:00Z"), annotations={FAKE_DEVICES_ANNOTATION: gpus[1]})
    result = tick(NodeAgent("n1", RECORDING), DeviceRecord(tmp_path), [annotated, whole("new", "2026-01-01T00:00:01Z")],
                  inv)
    assert result.recorded == {"uid-new": (gpus[0],)} and result.annotate == []

    memory = DeviceRecord(None)  # no directory: the annotation is the record that survives restarts
    assert not memory.on_disk
    legacy = tick(NodeAgent("n1", AgentConfig(may_choose_devices=True)), memory, [whole("p", "t0")], inv)
    assert [(a.name, a.key, a.value) for a in legacy.annotate] == [("p", FAKE_DEVICES_ANNOTATION, gpus[0])]
    assert memory.of("n1") == {"uid-p": (gpus[0],)}


def test_a_torn_or_foreign_file_starts_the_node_afresh_and_an_unchanged_record_is_not_rewritten(tmp_path):
    (tmp_path / "n1.json").write_text('{"node": "n1", "pods": {"u1": ["GPU-a"')
    (tmp_path / "n2.json").write_text(json.dumps({"node": "other", "pods": {"u1": ["GPU-a"]}}))
    record = DeviceRecord(tmp_path)
    assert record.of("n1") == {} and record.of("n2") == {}
    assert record.update("n3", {"u1": ("GPU-a",)}, live=["u1"])
    written = (tmp_path / "n3.json").stat().st_mtime_ns
    assert not record.update("n3", {}, live=["u1"])  # nothing new, nobody gone
    assert (tmp_path / "n3.json").stat().st_mtime_ns == written
    record.forget("n3")
    assert DeviceRecord(tmp_path).of("n3") == {"u1": ("GPU-a",)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n1.json", "n2.json", "n3.json"]  # no temp files left

import pytest

from services.nodeagent.fake_backend import FakeInventory, fake_gpu_uuid, gpus_for_node
from services.nodeagent.inventory import NoSuchProcess


def test_gpus_derived_from_labels_deterministically():
    labels = {"nvidia.com/gpu.memory": "16384", "nvidia.com/gpu.product": "Tesla-T4"}
    gpus = gpus_for_node("node-a", labels, {"nvidia.com/gpu": "2"})
    assert [g.index for g in gpus] == [0, 1]
    assert all(g.memory_total_mib == 16384 and g.name == "Tesla-T4" for g in gpus)
    assert gpus[0].uuid == fake_gpu_uuid("node-a", 0) != fake_gpu_uuid("node-b", 0)
    assert gpus[0].uuid.startswith("GPU-") and len(gpus[0].uuid) == 40
    assert gpus == gpus_for_node("node-a", labels, {"nvidia.com/gpu": "2"})


def test_count_falls_back_to_label_and_mig_instances():
    gpus = gpus_for_node("n", {"nvidia.com/gpu.count": "3", "nvidia.com/mig.strategy": "mixed"}, {})
    assert len(gpus) == 3
    assert all(g.mig_enabled and len(g.mig_instances) == 2 for g in gpus)
    assert gpus[0].memory_total_mib == 81920
    assert gpus_for_node("n", {"nvidia.com/gpu.count": "x"}, {}) == ()


def test_processes_sample_and_kill():
    inv = FakeInventory.for_node("n", {"nvidia.com/gpu.memory": "1000"}, {"nvidia.com/gpu": "1"})
    gpu = inv.gpus[0].uuid
    inv.start_process(pid=10, gpu_uuid=gpu, used_mib=300, start_ticks=5, pod_uid="u1", utilization_percent=40)
    inv.start_process(pid=11, gpu_uuid=gpu, used_mib=200, start_ticks=6, pod_uid="u2", utilization_percent=70)
    sample = inv.sample()
    assert sample.gpus[0].memory_used_mib == 500 and sample.gpus[0].utilization_percent == 100
    assert [p.pid for p in sample.processes] == [10, 11]
    with pytest.raises(NoSuchProcess):
        inv.kill(10, 4)  # wrong start time: a different process
    inv.kill(10, 5)
    assert [p.pid for p in inv.sample().processes] == [11]
    assert inv.killed == [(10, 5)]
    with pytest.raises(KeyError):
        inv.start_process(pid=12, gpu_uuid="GPU-nope", used_mib=1, start_ticks=1)


def test_sync_simulated_processes_and_killed_stay_dead():
    inv = FakeInventory.for_node("n", {"nvidia.com/gpu.memory": "1000"}, {"nvidia.com/gpu": "2"})
    g0, g1 = (g.uuid for g in inv.gpus)
    inv.sync_simulated({("u1", g0): (300, 20), ("u2", g1): (100, 0)})
    procs = {p.pod_uid: p for p in inv.sample().processes}
    assert (procs["u1"].used_mib, procs["u1"].gpu_uuid, procs["u1"].sm_util_percent) == (300, g0, 20)
    inv.sync_simulated({("u1", g0): (600, 20), ("u2", g1): (100, 0)})
    assert {p.pod_uid: p.used_mib for p in inv.sample().processes} == {"u1": 600, "u2": 100}
    victim = next(p for p in inv.sample().processes if p.pod_uid == "u1")
    inv.kill(victim.pid, victim.start_ticks)
    inv.sync_simulated({("u1", g0): (600, 20), ("u2", g1): (100, 0)})
    assert [p.pod_uid for p in inv.sample().processes] == ["u2"]  # a killed process is not respawned
    inv.sync_simulated({})
    assert inv.sample().processes == ()

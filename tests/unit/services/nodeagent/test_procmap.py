"""PID → pod from fake /proc trees: cgroup v1/v2, systemd/cgroupfs, containerd/crio/docker."""

from pathlib import Path

import pytest

from services.nodeagent.inventory import NoSuchProcess
from services.nodeagent.procmap import (
    ProcFs,
    SignalKiller,
    parse_cgroup,
    parse_start_ticks,
    parse_visible_devices,
)

UID = "1b2c3d4e-5f60-4a1b-8c9d-0e1f2a3b4c5d"
CID = "a" * 64

CASES = [
    ("v2 systemd containerd burstable",
     f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"),
    ("v2 systemd crio guaranteed",
     f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope\n"),
    ("v2 systemd docker besteffort",
     f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice/docker-{CID}.scope\n"),
    ("v1 cgroupfs",
     f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n1:name=systemd:/\n"),
    ("v1 cgroupfs guaranteed", f"5:pids:/kubepods/pod{UID}/{CID}\n"),
]


@pytest.mark.parametrize("text", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_parse_cgroup_formats(text):
    ref = parse_cgroup(text)
    assert ref is not None
    assert ref.pod_uid == UID
    assert ref.container_id == CID


def test_non_pod_process_has_no_ref():
    assert parse_cgroup("0::/system.slice/containerd.service\n") is None
    assert parse_cgroup("0::/user.slice/user-1000.slice/session-1.scope\n") is None


def test_start_ticks_with_spaces_and_parens_in_comm():
    stat = "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 " + " ".join(["0"] * 12) + " 987654 " + "1 " * 20
    assert parse_start_ticks(stat) == 987654


def test_visible_devices_plain_and_cdi():
    env = b"PATH=/bin\0NVIDIA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb\0HOME=/\0"
    assert parse_visible_devices(env) == ("GPU-aaa", "GPU-bbb")
    cdi = b"NVIDIA_VISIBLE_DEVICES=k8s.device-plugin.nvidia.com/gpu=GPU-ccc\0"
    assert parse_visible_devices(cdi) == ("GPU-ccc",)
    assert parse_visible_devices(b"NVIDIA_VISIBLE_DEVICES=void\0") == ()


def make_proc(root: Path, pid: int, cgroup: str, start: int, environ: bytes = b"") -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text(cgroup)
    (d / "stat").write_text(f"{pid} (python3) S 1 1 1 0 -1 0 " + " ".join(["0"] * 12) + f" {start} 0 0\n")
    (d / "comm").write_text("python3\n")
    (d / "environ").write_bytes(environ)


def test_procfs_tree(tmp_path):
    make_proc(tmp_path, 100, CASES[0][1], 555, b"NVIDIA_VISIBLE_DEVICES=GPU-x\0")
    make_proc(tmp_path, 200, "0::/system.slice/sshd.service\n", 7)
    (tmp_path / "self").mkdir()
    fs = ProcFs(tmp_path)
    assert fs.pids() == [100, 200]
    assert fs.container_of(100).pod_uid == UID
    assert fs.container_of(200) is None
    assert fs.container_of(999) is None
    assert fs.start_ticks(100) == 555
    assert fs.start_ticks(999) is None
    assert fs.comm(100) == "python3"
    assert fs.pids_of_pod(UID) == [100]
    assert fs.visible_devices_of_pod(UID) == ("GPU-x",)


def test_killer_refuses_reused_pid(tmp_path):
    make_proc(tmp_path, 100, CASES[0][1], 555)
    killer = SignalKiller(ProcFs(tmp_path))
    with pytest.raises(NoSuchProcess):
        killer.kill(100, 554)  # pid 100 is now another process: never signalled
    with pytest.raises(NoSuchProcess):
        killer.kill(101, 1)


def test_pids_by_pod_one_scan(tmp_path):
    make_proc(tmp_path, 100, CASES[0][1], 1, b"NVIDIA_VISIBLE_DEVICES=GPU-a\0")
    make_proc(tmp_path, 101, CASES[3][1], 2)
    make_proc(tmp_path, 300, "0::/init.scope\n", 3)
    fs = ProcFs(tmp_path)
    assert fs.pids_by_pod() == {UID: [100, 101]}
    assert fs.visible_devices_of_pod(UID, [101, 100]) == ("GPU-a",)

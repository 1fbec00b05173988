"""A real-node stack killed before `down` (its session ended) leaves its bridge and guard chains on the host.
The next `up --real-node` takes such a dead stack down from its state dir instead of refusing to start
(CI once failed five real-node tests on a bridge a killed run had left); a stack that still runs is refused,
by its state dir. Needs root: the bridge and iptables are real.

Each scenario runs in a child process in a network namespace of its own (`unshare --net --mount`, with /sys
mounted again so /sys/class/net shows that namespace): the bridge, routes and iptables chains it makes and removes
are real, and the suite's own real-node stack, up on the host meanwhile, neither blocks them nor is touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.devstack import DevStackError
from shoal.devstack.procs import ProcessSpec, launch, stop_processes
from shoal.devstack.realnode import hostnet, leftovers
from shoal.devstack.stack import clear_dead_real_node, down

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 and not os.environ.get("CI"), reason="a bridge and iptables chains need root"
)

_CHILD = """
import runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])[sys.argv[2]](Path(sys.argv[3]))
"""


def _in_own_netns(scenario: str, tmp_path: Path) -> None:
    argv = ["unshare", "--net", "--mount", "--propagation", "private", "--", "sh", "-c",
            'mount -t sysfs sysfs /sys && exec "$@"', "sh", sys.executable, "-c", _CHILD, __file__, scenario,
            str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{scenario} in its own network namespace:\n{done.stdout}\n{done.stderr}"


def _host_before() -> dict[str, list[str]]:
    assert not hostnet.bridge_exists(), f"{hostnet.BRIDGE} exists in a fresh network namespace"
    return leftovers.snapshot()


def _left(before: dict[str, list[str]], state: Path, pids: dict[str, int] | None = None) -> list[str]:
    # these stacks run no pods, while the suite's real node (sharing this process namespace) may: its pods'
    # processes are not counted, the scenario's own are (by pid, and any naming its state dir)
    return leftovers.compare(before, leftovers.snapshot(), pids or {}, state, pods=False)


def _kubelet_like(state: Path) -> int:
    """A process recorded in the state dir the way a real node's kubelet is."""
    return launch(state, ProcessSpec(name="kubelet-1", argv=["sleep", "300"]), tie_to_parent=True)


def dead_stack_taken_down(tmp_path: Path) -> None:
    host_before = _host_before()
    dead = tmp_path / "dead"
    hostnet.setup(dead, 1)
    assert hostnet.bridge_owner() == dead.resolve()
    pid = _kubelet_like(dead)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    said: list[str] = []
    removed = clear_dead_real_node(said.append)
    assert f"interface {hostnet.BRIDGE}" in removed
    assert any("SHOAL-GUARD" in r for r in removed), removed
    assert not hostnet.bridge_exists()
    assert len(said) == 1 and str(dead.resolve()) in said[0], said
    assert not dead.exists(), "the dead stack's state dir is removed like `down` removes it"
    left = _left(host_before, dead, {"kubelet-1": pid})
    assert not left, left


def running_stack_refused(tmp_path: Path) -> None:
    host_before = _host_before()
    live = tmp_path / "live"
    hostnet.setup(live, 1)
    pid = _kubelet_like(live)
    try:
        assert clear_dead_real_node(lambda _msg: None) == []
        assert hostnet.bridge_exists()
        try:
            hostnet.setup(tmp_path / "second", 1)
            raise AssertionError("a second stack was set up beside a running one")
        except DevStackError as e:
            assert f"another real-node stack in {live.resolve()} is up" in str(e), e
    finally:
        stop_processes(live, ["kubelet-1"], timeout_s=3.0)
        down(live)
    left = _left(host_before, live, {"kubelet-1": pid})
    assert not left, left


def orphan_bridge_removed(tmp_path: Path) -> None:
    host_before = _host_before()
    gone = tmp_path / "gone"
    hostnet.setup(gone, 1)
    subprocess.run(["rm", "-rf", str(gone)], check=True)
    removed = clear_dead_real_node(lambda _msg: None)
    assert f"interface {hostnet.BRIDGE}" in removed
    assert not hostnet.bridge_exists()
    # the guard chains went with it; the sysctls it had recorded cannot be restored without the record
    left = _left(host_before, gone)
    assert not left, left


def test_a_dead_stack_is_taken_down_from_its_state_dir(tmp_path: Path) -> None:
    _in_own_netns("dead_stack_taken_down", tmp_path)


def test_a_running_stack_is_refused_by_its_state_dir(tmp_path: Path) -> None:
    _in_own_netns("running_stack_refused", tmp_path)


def test_a_bridge_whose_state_dir_is_gone_is_removed(tmp_path: Path) -> None:
    _in_own_netns("orphan_bridge_removed", tmp_path)

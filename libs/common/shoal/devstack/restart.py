"""Restart one core component of a running stack in place: same ports, same data, new pid.

    took = restart_component(state_dir, "kafka")      # stop by pid, start again, wait until ready

The component's spec is rebuilt from `components` with the ports recorded in `stack.json` (Kafka's
controller port is read back from its `server.properties`; etcd's peer port and the fake kubelet's delete
delay from the running process's command line). Kafka's storage is never formatted again: the broker
starts on the log directory it had, so topics, offsets and consumer groups survive the restart.

For fault tests that must keep an event loop turning, the two halves are separate: `stop_component`, then
`start_component` (launch, from the thread that should own the child) and `wait_ready`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from shoal.devstack import components
from shoal.devstack.errors import DevStackError
from shoal.devstack.pki import Pki
from shoal.devstack.procs import ProcessSpec, alive, launch, read_pid, stop_process, wait_ready
from shoal.devstack.stack import CORE_COMPONENTS, StackInfo


def _live_flag(state: Path, name: str, flag: str) -> str | None:
    """The value of `--flag=V` (or `--flag V`) on the recorded, still running process `name`."""
    found = read_pid(state, name)
    if found is None or not alive(*found):
        return None
    try:
        argv = Path(f"/proc/{found[0]}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    for i, arg in enumerate(argv):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _port(info: StackInfo, name: str) -> int:
    port = info.ports.get(name)
    if not port:
        raise DevStackError(f"no port recorded for {name} in {info.state_dir}/stack.json")
    return port


def _kafka_controller_port(state: Path) -> int:
    props = state / "kafka" / "server.properties"
    try:
        text = props.read_text()
    except OSError:
        raise DevStackError(f"kafka has no {props}: was it ever started here?") from None
    match = re.search(r"^controller\.quorum\.voters=\d+@[^:]+:(\d+)$", text, re.MULTILINE)
    if match is None:
        raise DevStackError(f"no controller.quorum.voters in {props}")
    return int(match.group(1))


def component_spec(state_dir: Path | str, name: str) -> ProcessSpec:
    """The spec `name` was started with: same ports, same data dir (nothing is formatted or wiped)."""
    state = Path(state_dir).resolve()
    info = StackInfo.load(state)
    pki = Pki(state / "pki")
    kubeconfig = Path(info.kubeconfig)
    if name == "kafka":
        # components.kafka rewrites server.properties with the same content; its format command is not run
        spec, _format = components.kafka(state, _port(info, "kafka"), _kafka_controller_port(state))
        return spec
    if name == "redis":
        return components.redis(state, _port(info, "redis"))
    if name == "etcd":
        peer = info.ports.get("etcd-peer")
        if not peer:
            url = _live_flag(state, "etcd", "--listen-peer-urls")
            if url is None:
                raise DevStackError("etcd's peer port is not recorded and etcd is not running to ask")
            peer = int(url.rsplit(":", 1)[1])
        return components.etcd(state, _port(info, "etcd"), peer)
    if name == "kube-apiserver":
        return components.apiserver(state, pki, _port(info, "etcd"), _port(info, "kube-apiserver"))
    if name == "kube-controller-manager":
        return components.controller_manager(pki, kubeconfig, _port(info, "kube-controller-manager"))
    if name == "fakekubelet":
        delay = float(_live_flag(state, "fakekubelet", "--delete-delay") or 1.0)
        return components.fake_kubelet(state, kubeconfig, delay)
    raise DevStackError(f"{name} is not a core component ({', '.join(CORE_COMPONENTS)})")


def stop_component(state_dir: Path | str, name: str, *, timeout_s: float = 10.0) -> None:
    """Stop `name` by its recorded pid (SIGTERM, SIGKILL after `timeout_s`); its data stays."""
    stop_process(Path(state_dir).resolve(), name, timeout_s=timeout_s)


def start_component(state_dir: Path | str, spec: ProcessSpec, *, tie_to_parent: bool = False) -> int:
    """Launch `spec` again and record its new pid in stack.json; returns at once (see `wait_ready`)."""
    state = Path(state_dir).resolve()
    found = read_pid(state, spec.name)
    if found is not None and alive(*found):
        raise DevStackError(f"{spec.name} is still running (pid {found[0]}): stop it first")
    pid = launch(state, spec, tie_to_parent=tie_to_parent)
    info = StackInfo.load(state)
    info.pids[spec.name] = pid
    info.save()
    return pid


def restart_component(
    state_dir: Path | str, name: str, *, tie_to_parent: bool = False, stop_timeout_s: float = 10.0
) -> float:
    """Stop `name`, start it again on the same ports and data, wait until it is ready.

    Returns the seconds from the start of the new process until it answered its readiness check.
    With `tie_to_parent` the new process dies with the caller (call from the main thread then); leave it
    off when restarting a stack that outlives the caller (`shoal dev up`).
    """
    state = Path(state_dir).resolve()
    spec = component_spec(state, name)
    stop_component(state, name, timeout_s=stop_timeout_s)
    began = time.monotonic()
    pid = start_component(state, spec, tie_to_parent=tie_to_parent)
    wait_ready(state, spec, pid)
    return time.monotonic() - began

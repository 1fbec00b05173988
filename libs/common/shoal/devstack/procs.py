"""Start, track and stop the stack's processes by pid; pick free loopback ports; wait for readiness.

Every process the stack starts (servers, the fake kubelet, and later Shoal's own services) goes through
`start_process`: its own session, stdout+stderr to a log file, pid written to `<state>/pids/<name>.pid`.
`stop_process` only signals a pid whose command line still matches what was started.
"""

from __future__ import annotations

import ctypes
import os
import random
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shoal.devstack.errors import DevStackError

_PR_SET_PDEATHSIG = 1
# Popen objects of children started by this process, so stopped children are reaped (no zombies).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free on 127.0.0.1 right now, below the ephemeral range when possible.

    The OS hands out ephemeral ports to outgoing connections too: a port picked with bind(0) and released
    could be taken by some client's connect() before our server binds it. Ports below the ephemeral range are
    only taken by servers binding them explicitly. A port is handed out once per process: servers launched
    together bind theirs only later, so two picks in a row could otherwise name the same free port, and the
    second server's readiness probe would be answered by the first (a CI run lost its node agent that way).
    """
    low, _high = _ephemeral_range()
    if low > 20000:
        for _ in range(50):
            port = random.randrange(15000, low)
            if port in _HANDED_OUT:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                if not port_open(port):
                    _HANDED_OUT.add(port)
                    return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    """True when `url` (a server of the stack, on this machine) answers 200 within 2 s."""
    with urllib.request.urlopen(url, timeout=2, context=context) as resp:  # noqa: S310 - local servers only
        return resp.status == 200


@dataclass
class ProcessSpec:
    """One process the stack supervises. `ready` is polled until it returns True (or raises)."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    ready: Callable[[], bool] | None = None
    ready_timeout_s: float = 60.0


def _die_with_parent() -> None:
    """preexec hook: the child gets SIGKILL when the process that started it dies (tests only)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def pid_file(state_dir: Path, name: str) -> Path:
    return state_dir / "pids" / f"{name}.pid"


def log_file(state_dir: Path, name: str) -> Path:
    return state_dir / "logs" / f"{name}.log"


def start_process(state_dir: Path, spec: ProcessSpec, *, tie_to_parent: bool = False) -> int:
    """Start `spec` and wait until it is ready (see `launch` and `wait_ready`); return its pid."""
    pid = launch(state_dir, spec, tie_to_parent=tie_to_parent)
    wait_ready(state_dir, spec, pid)
    return pid


def launch(state_dir: Path, spec: ProcessSpec, *, tie_to_parent: bool = False) -> int:
    """Start `spec` in its own session with its output in `<state>/logs/<name>.log`; return its pid at once.

    With `tie_to_parent` the child is killed if the calling thread's process dies (pytest sessions); call
    it from the main thread then.
    """
    log = log_file(state_dir, spec.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    pid_file(state_dir, spec.name).parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **spec.env}
    try:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                list(spec.argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=spec.cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent if tie_to_parent else None,
            )
    except OSError as exc:
        raise DevStackError(f"cannot start {spec.name} ({spec.argv[0]}): {exc.strerror}") from None
    _CHILDREN[proc.pid] = proc
    pid_file(state_dir, spec.name).write_text(f"{proc.pid}\n{spec.argv[0]}\n{_start_ticks(proc.pid)}\n")
    return proc.pid


def wait_ready(state_dir: Path, spec: ProcessSpec, pid: int) -> None:
    """Poll `spec.ready` until True; DevStackError naming the telling log line if it exits or times out."""
    if spec.ready is None:
        return
    log = log_file(state_dir, spec.name)
    proc = _CHILDREN.get(pid)
    deadline = time.monotonic() + spec.ready_timeout_s
    while True:
        code = proc.poll() if proc is not None else (None if Path(f"/proc/{pid}").exists() else -1)
        if code is not None:
            raise DevStackError(
                f"{spec.name} exited with code {code} while starting: {last_log_line(log)} (log: {log})"
            )
        try:
            if spec.ready():
                return
        except DevStackError:
            raise
        except Exception:  # noqa: BLE001 - not ready yet: connection refused, 5xx, TLS not up
            pass
        if time.monotonic() > deadline:
            raise DevStackError(
                f"{spec.name} not ready after {spec.ready_timeout_s:.0f}s: {last_log_line(log)} (log: {log})"
            )
        time.sleep(0.1)


def last_log_line(log: Path) -> str:
    """The most telling line of a log: the last one mentioning an error, else the last line."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    for ln in reversed(lines[-200:]):
        low = ln.lower()
        if "address already in use" in low or "bind" in low and "in use" in low:
            return "port already in use: " + ln[-300:]
    for ln in reversed(lines[-60:]):
        if any(word in ln.lower() for word in ("error", "fatal", "exception", "failed")):
            return ln[-300:]
    return lines[-1][-300:] if lines else "empty log"


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat): with the pid it
    names one process for good, so a recycled pid is never mistaken for ours."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return ""


def read_pid(state_dir: Path, name: str) -> tuple[int, str, str] | None:
    """(pid, executable, start ticks) recorded for `name`, or None."""
    try:
        lines = pid_file(state_dir, name).read_text().split("\n")
        return int(lines[0]), lines[1], (lines[2] if len(lines) > 2 else "")
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int, exe: str, ticks: str = "") -> bool:
    """True if `pid` is running (not a zombie) and is the process that was started (same start time;
    without a recorded start time: its command line still begins with `exe`)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if stat[0] == "Z":
        return False
    if ticks:
        return stat[19] == ticks
    return cmdline.decode(errors="replace").startswith(exe)


def stop_process(state_dir: Path, name: str, timeout_s: float = 5.0) -> None:
    """Stop one recorded process; see `stop_processes`."""
    stop_processes(state_dir, [name], timeout_s)


def stop_processes(state_dir: Path, names: list[str], timeout_s: float = 5.0) -> None:
    """SIGTERM every recorded pid that is still ours, SIGKILL those left after `timeout_s`, reap them,
    and remove their pid files. Processes stop in parallel."""
    targets = {}
    for name in names:
        found = read_pid(state_dir, name)
        if found is not None:
            targets[name] = found
    running = {name: t for name, t in targets.items() if alive(*t)}
    for pid, _exe, _ticks in running.values():
        _signal(pid, signal.SIGTERM)
    for sig, wait_s in ((signal.SIGKILL, timeout_s), (None, 5.0)):
        deadline = time.monotonic() + wait_s
        while running and time.monotonic() < deadline:
            for pid, _exe, _ticks in running.values():
                _reap(pid)
            running = {n: t for n, t in running.items() if alive(*t)}
            if running:
                time.sleep(0.05)
        if sig is not None:
            for pid, _exe, _ticks in running.values():
                _signal(pid, sig)
    for name, (pid, _exe, _ticks) in targets.items():
        _reap(pid)
        pid_file(state_dir, name).unlink(missing_ok=True)


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    proc = _CHILDREN.get(pid)
    if proc is not None and proc.poll() is not None:
        _CHILDREN.pop(pid, None)

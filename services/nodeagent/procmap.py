"""PID → pod from /proc/<pid>/cgroup, process start times, and the device a container was given.

NVML reports host PIDs, so the agent runs with hostPID and reads the host's /proc. Recognised
cgroup paths (v1: many `id:controllers:path` lines; v2: one `0::path` line):
- systemd driver: `.../kubepods-<qos>-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope`,
  `crio-<id>.scope`, `docker-<id>.scope` (Guaranteed pods have no `<qos>` part);
- cgroupfs driver: `/kubepods/<qos>/pod<uid>/<id>` (or `/kubepods/pod<uid>/<id>`).
`ProcFs(root)` takes a root so tests build fake trees in a tmp dir.
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from services.nodeagent.inventory import NoSuchProcess

_POD = re.compile(r"pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})")
_CONTAINER = re.compile(r"^(?:cri-containerd-|crio-|docker-)?([0-9a-f]{64})(?:\.scope)?$")


@dataclass(frozen=True)
class ContainerRef:
    pod_uid: str
    container_id: str  # bare 64-hex id, without the `containerd://` scheme


def parse_cgroup(text: str) -> ContainerRef | None:
    """The pod UID and container id in a /proc/<pid>/cgroup file, or None for a non-pod process."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2]
        if "kubepods" not in path:
            continue
        pod_match = _POD.search(path)
        if pod_match is None:
            continue
        pod_uid = pod_match.group(1).replace("_", "-").lower()
        segments = [s for s in path[pod_match.end():].split("/") if s]
        container_id = ""
        for segment in segments:
            found = _CONTAINER.match(segment)
            if found:
                container_id = found.group(1)
                break
        return ContainerRef(pod_uid=pod_uid, container_id=container_id)
    return None


def bare_container_id(status_id: str) -> str:
    """`containerd://abc…` → `abc…` (as in pod.status.containerStatuses[].containerID)."""
    return status_id.split("://", 1)[-1]


def parse_start_ticks(stat_text: str) -> int:
    """Field 22 (starttime) of /proc/<pid>/stat; the comm field may contain spaces and parentheses."""
    after_comm = stat_text[stat_text.rindex(")") + 2:]
    fields = after_comm.split()
    return int(fields[19])  # field 3 is fields[0], so field 22 is fields[19]


def parse_visible_devices(environ: bytes) -> tuple[str, ...]:
    """GPU UUIDs the device plugin put in NVIDIA_VISIBLE_DEVICES (envvar strategy), from /proc/<pid>/environ."""
    for item in environ.split(b"\0"):
        if item.startswith(b"NVIDIA_VISIBLE_DEVICES="):
            value = item.split(b"=", 1)[1].decode(errors="replace")
            ids = []
            for part in value.split(","):
                part = part.strip().rsplit("=", 1)[-1]  # CDI form k8s.device-plugin.nvidia.com/gpu=<uuid>
                if part.startswith(("GPU-", "MIG-")):
                    ids.append(part)
            return tuple(ids)
    return ()


class ProcFs:
    """Reads a /proc tree rooted at `root` ("/proc" on a node, a tmp dir in tests)."""

    def __init__(self, root: str | Path = "/proc") -> None:
        self.root = Path(root)

    def _read(self, pid: int, name: str) -> str | None:
        try:
            return (self.root / str(pid) / name).read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            return None

    def container_of(self, pid: int) -> ContainerRef | None:
        text = self._read(pid, "cgroup")
        return parse_cgroup(text) if text is not None else None

    def start_ticks(self, pid: int) -> int | None:
        text = self._read(pid, "stat")
        if text is None:
            return None
        try:
            return parse_start_ticks(text)
        except (ValueError, IndexError):
            return None

    def comm(self, pid: int) -> str:
        text = self._read(pid, "comm")
        return text.strip() if text else ""

    def pids(self) -> list[int]:
        try:
            return sorted(int(e.name) for e in os.scandir(self.root) if e.name.isdigit())
        except FileNotFoundError:
            return []

    def pids_of_pod(self, pod_uid: str) -> list[int]:
        out = []
        for pid in self.pids():
            ref = self.container_of(pid)
            if ref is not None and ref.pod_uid == pod_uid:
                out.append(pid)
        return out

    def pids_by_pod(self) -> dict[str, list[int]]:
        """Every pod's host pids, from one scan of /proc."""
        out: dict[str, list[int]] = {}
        for pid in self.pids():
            ref = self.container_of(pid)
            if ref is not None:
                out.setdefault(ref.pod_uid, []).append(pid)
        return out

    def visible_devices_of_pod(self, pod_uid: str, pids: list[int] | None = None) -> tuple[str, ...]:
        """The GPU UUIDs given to a pod's containers, read from its processes' environment."""
        for pid in pids if pids is not None else self.pids_of_pod(pod_uid):
            try:
                environ = (self.root / str(pid) / "environ").read_bytes()
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
            devices = parse_visible_devices(environ)
            if devices:
                return devices
        return ()


class SignalKiller:
    """SIGKILL a host process, after re-checking its start time (PID-reuse safety)."""

    def __init__(self, procfs: ProcFs) -> None:
        self.procfs = procfs

    def kill(self, pid: int, start_ticks: int) -> None:
        if self.procfs.start_ticks(pid) != start_ticks:
            raise NoSuchProcess(f"pid {pid} is gone or was reused")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError as exc:
            raise NoSuchProcess(f"pid {pid} is gone") from exc

"""What a real node could leave on the host, to check that `down` removed it all.

    before = snapshot()
    ... up(state, real_node=...) ... down(state)
    assert not compare(before, snapshot(), pids, state)
"""

from __future__ import annotations

from pathlib import Path

from shoal.devstack.realnode import hostnet

NETNS_DIRS = ("/var/run/netns", "/run/netns")


def _names(directory: str) -> list[str]:
    path = Path(directory)
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else []


def snapshot() -> dict[str, list[str]]:
    chains = hostnet.chains()
    return {
        "links": _names("/sys/class/net"),
        "chains": sorted(f"{key}:{c}" for key, names in chains.items() for c in names),
        "nft tables": hostnet.nft_tables(),
        "netns": sorted({n for d in NETNS_DIRS for n in _names(d)}),
        "container logs": _names("/var/log/containers"),
        "cgroups": sorted(
            str(p) for p in Path("/sys/fs/cgroup").glob("*/shoal-*") if p.is_dir()
        ),
        "mounts": sorted({ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines()}),
    }


def compare(
    before: dict[str, list[str]], after: dict[str, list[str]], pids: dict[str, int], state: Path, *,
    pods: bool = True,
) -> list[str]:
    """What is in `after` but not `before` and could be ours, plus processes of the stack still alive.
    `pods`: also every process in a real node's cgroups (their names do not name the state dir); False for a
    check made beside another real-node stack that runs pods, of a stack that ran none."""
    left = []
    for key, now in after.items():
        for item in sorted(set(now) - set(before.get(key, []))):
            if key == "links" and not item.startswith(("shoal", "veth")):
                continue  # another program's interface
            if key == "chains" and not item.split(":")[-1].startswith(hostnet.OUR_CHAIN_PREFIXES):
                continue
            if key == "mounts" and not item.startswith(str(state)):
                continue
            left.append(f"{key}: {item}")
    for name, pid in pids.items():
        if _running(pid):
            left.append(f"process {name} (pid {pid})")
    left += [f"process {pid} ({cmd[:80]})" for pid, cmd in _processes_of(str(state), pods=pods)]
    return left


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _processes_of(state: str, *, pods: bool = True) -> list[tuple[int, str]]:
    """Processes whose command line names the state dir (containerd shims) or, with `pods`, that live in a
    real node's cgroups (the pods' processes)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cgroups = (proc / "cgroup").read_text()
        except OSError:
            continue
        if (state in cmd or (pods and "/shoal-real-node-" in cgroups)) and _running(int(proc.name)):
            found.append((int(proc.name), cmd))
    return found

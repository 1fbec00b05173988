"""The whole local stack: start it under a state dir, describe it (StackInfo), report on it, stop it.

    info = up(state_dir)          # etcd, kube-apiserver, kube-controller-manager, fake kubelet, Kafka, Redis
    info = up(state_dir, real_node=RealNodeOptions(count=1))   # ... plus real nodes (realnode/)
    print(status(state_dir))      # each component, pid, alive
    down(state_dir)               # stop by pid, remove the state dir

Extra processes (Shoal's services, a demo workload) join through `start_extra(state_dir, ProcessSpec)`:
same log/pid handling, listed in stack.json, stopped first by `down`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from shoal.devstack import components, realnode
from shoal.devstack.binaries import ensure_binaries
from shoal.devstack.errors import DevStackError
from shoal.devstack.pki import Pki, make_pki, write_kubeconfig
from shoal.devstack.procs import (
    ProcessSpec,
    alive,
    free_port,
    last_log_line,
    launch,
    read_pid,
    start_process,
    stop_processes,
    wait_ready,
)

INFO_FILE = "stack.json"
# the core processes; `down` stops them after any extras
CORE_COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "fakekubelet", "kafka", "redis")


@dataclass
class StackInfo:
    """How to reach a running stack. Saved as `<state_dir>/stack.json`."""

    kubeconfig: str
    kafka_bootstrap: str
    redis_url: str
    state_dir: str = ""
    apiserver_url: str = ""
    pids: dict[str, int] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    extras: list[str] = field(default_factory=list)
    real_nodes: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The variables a process (or `StackInfo.from_env`) uses to attach to this stack."""
        env = {
            "SHOAL_KUBECONFIG": self.kubeconfig,
            "KUBECONFIG": self.kubeconfig,
            "SHOAL_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "SHOAL_REDIS_URL": self.redis_url,
            # the local stack's api lets every caller read every namespace (it logs `api_auth_off` at start);
            # a process that wants authorisation sets SHOAL_API_AUTH=kubernetes (docs/security.md)
            "SHOAL_API_AUTH": "none",
        }
        if self.state_dir:
            env["SHOAL_DEV_STATE_DIR"] = self.state_dir
        return env

    def save(self) -> None:
        path = Path(self.state_dir) / INFO_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, state_dir: Path | str) -> StackInfo:
        path = Path(state_dir) / INFO_FILE
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            raise DevStackError(
                f"no stack in {state_dir} (no {INFO_FILE}): start one with `shoal dev up`"
            ) from None
        except (ValueError, TypeError) as exc:
            raise DevStackError(f"{path} is not a stack description: {exc}") from None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> StackInfo | None:
        """Attach to a running stack named by SHOAL_KUBECONFIG, SHOAL_KAFKA_BOOTSTRAP and SHOAL_REDIS_URL.

        None when none of them is set; DevStackError when only some are, or the kubeconfig is missing.
        """
        env = os.environ if environ is None else environ
        names = ("SHOAL_KUBECONFIG", "SHOAL_KAFKA_BOOTSTRAP", "SHOAL_REDIS_URL")
        present = [n for n in names if env.get(n)]
        if not present:
            return None
        if len(present) != len(names):
            missing = ", ".join(n for n in names if not env.get(n))
            raise DevStackError(
                f"set all of {', '.join(names)} to attach to a running stack; missing: {missing}"
            )
        if not Path(env["SHOAL_KUBECONFIG"]).is_file():
            raise DevStackError(f"SHOAL_KUBECONFIG={env['SHOAL_KUBECONFIG']} does not exist")
        return cls(
            kubeconfig=env["SHOAL_KUBECONFIG"],
            kafka_bootstrap=env["SHOAL_KAFKA_BOOTSTRAP"],
            redis_url=env["SHOAL_REDIS_URL"],
            state_dir=env.get("SHOAL_DEV_STATE_DIR", ""),
        )


@dataclass(frozen=True)
class RealNodeOptions:
    """Real nodes (kubelet + containerd) next to the fake ones, advertising fake GPUs (needs root)."""

    count: int = 1
    gpus: int = 8
    gpu_memory_mib: int = 81920
    pool: str = "default"


def up(
    state_dir: Path,
    *,
    tie_to_parent: bool = False,
    delete_delay_s: float = 1.0,
    real_node: RealNodeOptions | None = None,
    say: Callable[[str], None] | None = None,
) -> StackInfo:
    """Start every component under `state_dir` (which must not hold a running stack) and wait until ready.

    On any failure the components already started are stopped again and DevStackError is raised.
    With `tie_to_parent` the servers die with the calling process (what the pytest fixtures use).
    With `real_node` the apiserver listens on the first node's IP (on the stack's bridge) instead of 127.0.0.1.
    """
    say = say or (lambda _msg: None)
    state_dir = Path(state_dir).resolve()
    if any(row["alive"] for row in status(state_dir)):
        raise DevStackError(f"a stack is already running in {state_dir}: run `shoal dev down` first")
    _check_ours(state_dir)
    if real_node is not None and os.geteuid() == 0:
        clear_dead_real_node(say)  # before the state dir is wiped: it may be the dead stack's own
    ensure_binaries(say, real_node=real_node is not None)
    for attempt in (1, 2):
        if state_dir.exists():
            shutil.rmtree(state_dir)
        state_dir.mkdir(parents=True)
        info = StackInfo(kubeconfig="", kafka_bootstrap="", redis_url="", state_dir=str(state_dir))
        try:
            node_ips = _setup_host(state_dir, real_node)
            _start_core(state_dir, info, tie_to_parent, delete_delay_s, node_ips, say)
            if real_node is not None:
                info.real_nodes = realnode.start(
                    state_dir,
                    Path(info.kubeconfig),
                    Pki(state_dir / "pki"),
                    info.ports,
                    count=real_node.count,
                    gpus=real_node.gpus,
                    gpu_memory_mib=real_node.gpu_memory_mib,
                    pool=real_node.pool,
                    tie_to_parent=tie_to_parent,
                    say=say,
                )
                for name in realnode.component_names(state_dir):
                    found = read_pid(state_dir, name)
                    if found is not None:
                        info.pids[name] = found[0]
            break
        except DevStackError as exc:
            _stop_everything(state_dir)
            # a port picked free was taken before the server bound it: new ports, once
            if attempt == 2 or "port already in use" not in str(exc):
                raise
            say(f"devstack: {exc}; starting again on other ports")
        except BaseException:
            _stop_everything(state_dir)
            raise
    info.save()
    return info


def _setup_host(state: Path, real_node: RealNodeOptions | None) -> tuple[str, ...]:
    """The real nodes' bridge and guard rules, before the apiserver binds the first node's IP; the node IPs."""
    if real_node is None:
        return ()
    if os.geteuid() != 0:
        raise DevStackError("a real node needs root (bridge, iptables, mounts, cgroups)")
    if real_node.count < 1:
        raise DevStackError(f"real node count must be >= 1, got {real_node.count}")
    realnode.hostnet.setup(state, real_node.count)
    return tuple(realnode.hostnet.node_ip(i) for i in range(1, real_node.count + 1))


def clear_dead_real_node(say: Callable[[str], None]) -> list[str]:
    """Take down the real-node stack that left its bridge behind when none of its processes runs any more
    (its session was killed before `down`); return what was removed. A stack that still runs is left alone
    (`hostnet.setup` then refuses with its state dir)."""
    if not realnode.hostnet.bridge_exists():
        return []
    owner = realnode.hostnet.bridge_owner()
    if owner is None:  # a bridge made before it named its owner: alive while any real node's process runs
        if _real_node_processes():
            return []
    elif any(row["alive"] for row in status(owner)):
        return []
    removed = down(owner) if owner is not None and owner.is_dir() else []
    removed += realnode.hostnet.remove_orphan()
    say(f"devstack: took down a real-node stack that no longer ran (state dir {owner or 'unknown'}): "
        f"{', '.join(removed) or 'nothing left'}")
    return removed


def _real_node_processes() -> list[int]:
    """Running kubelets and containerds whose command line names a real node's directory."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
        except OSError:
            continue
        if argv and Path(argv[0].decode(errors="replace")).name in ("kubelet", "containerd") and any(
            b"/realnode/" in a for a in argv
        ):
            found.append(int(proc.name))
    return found


def _start_core(
    state: Path,
    info: StackInfo,
    tie: bool,
    delete_delay_s: float,
    node_ips: tuple[str, ...],
    say: Callable[[str], None],
) -> None:
    """Start the servers, overlapping the slow ones: Kafka's JVM boots while the apiserver does."""
    node_ip = node_ips[0] if node_ips else None
    began = time.monotonic()
    launched: dict[str, tuple[ProcessSpec, int]] = {}

    def launch_(spec: ProcessSpec) -> None:
        launched[spec.name] = (spec, launch(state, spec, tie_to_parent=tie))
        info.pids[spec.name] = launched[spec.name][1]
        info.save()

    def ready(name: str) -> None:
        spec, pid = launched[name]
        wait_ready(state, spec, pid)
        say(f"devstack: {name} ready (pid {pid}, {time.monotonic() - began:.1f}s after start)")

    kafka_port = free_port()
    kafka_spec, kafka_format = components.kafka(state, kafka_port, free_port())
    format_log = open(state / "kafka" / "format.log", "wb")  # noqa: SIM115 - closed below
    formatting = subprocess.Popen(
        kafka_format, stdout=format_log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        etcd_port, apiserver_port, redis_port = free_port(), free_port(), free_port()
        info.ports.update(
            {"etcd": etcd_port, "kube-apiserver": apiserver_port, "redis": redis_port, "kafka": kafka_port}
        )
        info.ports["etcd-peer"] = free_port()  # recorded so `restart_component` keeps it
        launch_(components.etcd(state, etcd_port, info.ports["etcd-peer"]))
        launch_(components.redis(state, redis_port))
        info.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        pki = make_pki(state / "pki", node_ips)
        info.apiserver_url = f"https://{node_ip or '127.0.0.1'}:{apiserver_port}"
        kubeconfig = write_kubeconfig(state / "kubeconfig", info.apiserver_url, pki)
        info.kubeconfig = str(kubeconfig)
        ready("etcd")
        launch_(components.apiserver(state, pki, etcd_port, apiserver_port, node_ip))
        # the fake kubelet retries its first list until the apiserver answers: start it now, so its
        # interpreter start-up overlaps the apiserver's
        launch_(components.fake_kubelet(state, kubeconfig, delete_delay_s))
        try:
            formatted = formatting.wait(timeout=90)
        except subprocess.TimeoutExpired:
            raise DevStackError("kafka storage format did not finish in 90s (machine overloaded?)") from None
        if formatted != 0:
            raise DevStackError(
                f"kafka storage format failed: {last_log_line(state / 'kafka' / 'format.log')}"
            )
    finally:
        if formatting.poll() is None:
            formatting.kill()
            formatting.wait()
        format_log.close()
    launch_(kafka_spec)
    info.kafka_bootstrap = f"127.0.0.1:{kafka_port}"
    ready("redis")
    ready("kube-apiserver")
    info.ports["kube-controller-manager"] = free_port()
    launch_(
        components.controller_manager(
            pki, kubeconfig, info.ports["kube-controller-manager"], real_node=node_ip is not None
        )
    )
    for name in ("kube-controller-manager", "fakekubelet", "kafka"):
        ready(name)


def start_extra(state_dir: Path, spec: ProcessSpec, *, tie_to_parent: bool = False) -> int:
    """Start one more supervised process (e.g. a Shoal service) with the stack's env added to `spec.env`."""
    info = StackInfo.load(state_dir)
    spec.env = {**info.env(), **spec.env}
    pid = start_process(Path(state_dir), spec, tie_to_parent=tie_to_parent)
    info.pids[spec.name] = pid
    if spec.name not in info.extras:
        info.extras.append(spec.name)
    info.save()
    return pid


def status(state_dir: Path) -> list[dict[str, object]]:
    """One row per process recorded in the state dir: name, pid, alive, ready (None: no probe for it)."""
    state_dir = Path(state_dir)
    try:
        loaded = StackInfo.load(state_dir)
        info: StackInfo | None = loaded
        names: Iterable[str] = [*loaded.pids]
    except DevStackError:
        info = None
        names = [p.stem for p in sorted((state_dir / "pids").glob("*.pid"))]
    rows: list[dict[str, object]] = []
    host = (urlparse(info.apiserver_url).hostname if info else None) or "127.0.0.1"
    for name in names:
        found = read_pid(state_dir, name)
        is_alive = bool(found and alive(*found))
        ready = components.probe(name, state_dir, info.ports.get(name), host) if info and is_alive else None
        rows.append({"name": name, "pid": found[0] if found else None, "alive": is_alive, "ready": ready})
    return rows


def _check_ours(state_dir: Path) -> None:
    """Refuse to wipe a directory that is neither empty nor a stack's state (e.g. a mistyped --state-dir)."""
    if not state_dir.exists():
        return
    if not state_dir.is_dir():
        raise DevStackError(f"state dir {state_dir} exists and is not a directory")
    if any(state_dir.iterdir()) and not ((state_dir / INFO_FILE).exists() or (state_dir / "pids").is_dir()):
        raise DevStackError(
            f"state dir {state_dir} is not empty and holds no stack: pick another --state-dir"
        )


def _stop_all(state_dir: Path, names: Iterable[str]) -> None:
    stop_processes(state_dir, list(names), timeout_s=3.0)


def _stop_everything(state_dir: Path) -> None:
    """After a failed start: the real nodes (and their host changes), then the core."""
    realnode.stop(state_dir)
    _stop_all(state_dir, CORE_COMPONENTS)


def down(state_dir: Path, *, keep_state: bool = False) -> list[str]:
    """Stop every recorded process by pid (extras first, then the core components); remove the state.

    Returns the names it stopped. Safe to call on a half-started or already stopped stack.
    """
    state_dir = Path(state_dir)
    if not state_dir.exists():
        return []
    recorded = [p.stem for p in (state_dir / "pids").glob("*.pid")]
    core = [n for n in CORE_COMPONENTS if n in recorded]
    # extras (Shoal's services and the like) first, then the real nodes, whose clean-up needs no apiserver
    others = [n for n in recorded if n not in core and not realnode.is_component(n)]
    _stop_all(state_dir, others)
    node_parts = realnode.stop(state_dir)
    _stop_all(state_dir, core)
    if keep_state:
        return others + node_parts + core
    if (state_dir / INFO_FILE).exists() or (state_dir / "pids").is_dir():
        shutil.rmtree(state_dir, ignore_errors=True)
    elif not any(state_dir.iterdir()):
        state_dir.rmdir()
    return others + node_parts + core

"""The host side of a real node: the pod bridge, guard rules, and undoing every change on the host.

`setup` records what the host looked like (iptables chains, the sysctls the kubelet tunes, which host
directories existed) in `<state>/realnode/host.json`, then creates the bridge `shoal-br0` (its alias names the
state dir that owns it, `bridge_owner`) with the node IPs,
a route that keeps service-CIDR traffic on the bridge, forwarding on the bridge only, and SHOAL-* guard chains
that drop anything forwarded between the bridge and any other interface. `teardown` puts all of it back: the
bridge goes, KUBE-*/SHOAL-* chains that were not there before go (and the empty nftables tables
iptables-nft made for them), the sysctls get their old values.

The kernel here has no dummy interface driver, so the node IPs live on the bridge the stack creates.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from shoal.devstack.errors import DevStackError

BRIDGE = "shoal-br0"
POD_NETWORK = "10.201.0.0/16"  # node i: IP 10.201.0.i, pods 10.201.i.2-254, gateway 10.201.0.1
SERVICE_CIDR = "10.0.0.0/24"  # the apiserver's --service-cluster-ip-range
CLUSTER_DNS_IP = "10.0.0.10"
# kube-proxy's and the kubelet's chains, and the guards. Not CNI-*: the bridge plugin without ipMasq makes none,
# and other programs on the machine (podman's CNI firewall plugin) own such chains.
OUR_CHAIN_PREFIXES = ("KUBE-", "SHOAL-")
TABLES = ("filter", "nat", "mangle", "raw")
# sysctls the kubelet sets when they differ (protectKernelDefaults=false): restored at teardown
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
)
# host directories the kubelet or containerd create outside the state dir: removed again if they were absent
HOST_DIRS = ("/var/run/netns", "/var/log/containers")


@dataclass
class HostRecord:
    """What `setup` found and made; `teardown` reads it back."""

    chains: dict[str, list[str]] = field(default_factory=dict)  # "iptables:nat" -> chains present before
    sysctls: dict[str, str] = field(default_factory=dict)
    absent_dirs: list[str] = field(default_factory=list)
    bridge: str = ""
    pod_log_dirs: list[str] = field(default_factory=list)
    nft_tables: list[str] = field(default_factory=list)  # "ip nat", ... present before (iptables-nft)


def node_ip(index: int) -> str:
    return str(ipaddress.ip_network(POD_NETWORK)[index])


def gateway_ip() -> str:
    return node_ip(1)


def pod_range(index: int) -> tuple[str, str]:
    base = ipaddress.ip_network(POD_NETWORK)[index * 256]
    return str(base + 2), str(base + 254)


def _run(*argv: str, check: bool = True) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise DevStackError(f"{argv[0]} not found: the real node needs iproute2 and iptables") from None
    if check and done.returncode != 0:
        raise DevStackError(f"{' '.join(argv)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _record_path(state: Path) -> Path:
    return state / "realnode" / "host.json"


def _save(state: Path, record: HostRecord) -> None:
    _record_path(state).parent.mkdir(parents=True, exist_ok=True)
    _record_path(state).write_text(json.dumps(asdict(record), indent=2) + "\n")


def load_record(state: Path) -> HostRecord | None:
    try:
        return HostRecord(**json.loads(_record_path(state).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _check_free() -> None:
    """Refuse a pod network or service range that overlaps an address or route of this machine."""
    if bridge_exists():
        owner = bridge_owner()
        where = f" in {owner}" if owner else ""
        raise DevStackError(
            f"interface {BRIDGE} exists: another real-node stack{where} is up (`shoal dev down` it first)"
        )
    ours = [ipaddress.ip_network(POD_NETWORK), ipaddress.ip_network(SERVICE_CIDR)]
    used = []
    for route in json.loads(_run("ip", "-j", "-4", "route", "show", "table", "all") or "[]"):
        dst = route.get("dst", "")
        if dst and dst != "default":
            used.append(ipaddress.ip_network(dst, strict=False))
    for net in ours:
        clash = [u for u in used if u.overlaps(net) and not u.is_loopback]
        if clash:
            raise DevStackError(f"{net} overlaps a route of this machine ({clash[0]}): cannot use it for pods")


def bridge_exists() -> bool:
    return Path(f"/sys/class/net/{BRIDGE}").exists()


def bridge_owner() -> Path | None:
    """The state dir of the stack that made the bridge (its interface alias), or None (no bridge, or a bridge
    made before the alias was written)."""
    try:
        alias = Path(f"/sys/class/net/{BRIDGE}/ifalias").read_text().strip()
    except OSError:
        return None
    return Path(alias) if alias.startswith("/") else None


def remove_orphan() -> list[str]:
    """The bridge and the SHOAL-* guard chains of a stack whose state dir is gone (no record to undo from),
    and nftables tables left empty (no rule, every chain accepting). KUBE-* chains stay: without the record
    nothing tells them from another Kubernetes node's; the next kube-proxy takes them over."""
    done = []
    if bridge_exists():
        _run("ip", "link", "delete", BRIDGE, check=False)
        done.append(f"interface {BRIDGE}")
    keep = {key: [c for c in names if not c.startswith("SHOAL-")] for key, names in chains().items()}
    return done + remove_chains(keep) + _remove_new_empty_tables([])


def chains() -> dict[str, list[str]]:
    """Every user chain of iptables and ip6tables, per table."""
    found: dict[str, list[str]] = {}
    for tool in ("iptables", "ip6tables"):
        if shutil.which(tool) is None:
            continue
        for table in TABLES:
            out = _run(tool, "-w", "-t", table, "-S", check=False)
            found[f"{tool}:{table}"] = [ln.split()[1] for ln in out.splitlines() if ln.startswith("-N ")]
    return found


def nft_tables() -> list[str]:
    """The nftables tables ("ip nat", ...): iptables-nft creates them on first use, `teardown` removes them."""
    if shutil.which("nft") is None:
        return []
    return [ln.removeprefix("table ").strip() for ln in _run("nft", "list", "tables", check=False).splitlines()]


def _remove_new_empty_tables(before: list[str]) -> list[str]:
    removed = []
    for table in nft_tables():
        if table in before or table.split()[0] not in ("ip", "ip6"):
            continue
        listing = json.loads(_run("nft", "-j", "list", "table", *table.split(), check=False) or "{}")
        items = listing.get("nftables", [])
        if not any("rule" in item or item.get("chain", {}).get("policy", "accept") != "accept" for item in items):
            _run("nft", "delete", "table", *table.split(), check=False)
            removed.append(f"nft table {table}")
    return removed


def setup(state: Path, node_count: int) -> HostRecord:
    """Record the host's state, then create the bridge, the node IPs and the guard rules."""
    _check_free()
    record = HostRecord(
        chains=chains(),
        sysctls={k: Path(f"/proc/sys/{k}").read_text().strip() for k in KUBELET_SYSCTLS},
        absent_dirs=[d for d in HOST_DIRS if not Path(d).exists()],
        bridge=BRIDGE,
        nft_tables=nft_tables(),
    )
    _save(state, record)  # before any change, so a failure below is undone from it
    prefix = ipaddress.ip_network(POD_NETWORK).prefixlen
    _run("ip", "link", "add", BRIDGE, "type", "bridge")
    _run("ip", "link", "set", BRIDGE, "alias", str(state.resolve()))
    for index in range(1, node_count + 1):
        _run("ip", "addr", "add", f"{node_ip(index)}/{prefix}", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")
    # traffic to a service IP never follows the default route out of the machine, even before kube-proxy
    _run("ip", "route", "add", SERVICE_CIDR, "dev", BRIDGE, "src", gateway_ip())
    Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/forwarding").write_text("1\n")
    _guard()
    return record


def _guard() -> None:
    """mangle SHOAL-GUARD: forwarded packets stay between bridge ports; SHOAL-GUARD-OUT: the host's packets
    to a service IP leave only through the bridge or loopback, whatever a DNAT made of them."""
    ipt = ("iptables", "-w", "-t", "mangle")
    _run(*ipt, "-N", "SHOAL-GUARD")
    _run(*ipt, "-A", "SHOAL-GUARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "RETURN")
    _run(*ipt, "-A", "SHOAL-GUARD", "-i", BRIDGE, "-j", "DROP")
    _run(*ipt, "-A", "SHOAL-GUARD", "-o", BRIDGE, "-j", "DROP")
    _run(*ipt, "-I", "FORWARD", "1", "-j", "SHOAL-GUARD")
    _run(*ipt, "-N", "SHOAL-GUARD-OUT")
    _run(*ipt, "-A", "SHOAL-GUARD-OUT", "-o", BRIDGE, "-j", "RETURN")
    _run(*ipt, "-A", "SHOAL-GUARD-OUT", "-o", "lo", "-j", "RETURN")
    for net in (SERVICE_CIDR, POD_NETWORK):
        _run(*ipt, "-A", "SHOAL-GUARD-OUT", "-m", "conntrack", "--ctorigdst", net, "-j", "DROP")
    _run(*ipt, "-I", "POSTROUTING", "1", "-j", "SHOAL-GUARD-OUT")


def remove_chains(before: dict[str, list[str]]) -> list[str]:
    """Delete KUBE-*/CNI-*/SHOAL-* chains that were not in `before` (jumps to them first); return them."""
    removed = []
    for key, now in chains().items():
        tool, table = key.split(":")
        had = set(before.get(key, []))
        doomed = [c for c in now if c.startswith(OUR_CHAIN_PREFIXES) and c not in had]
        if not doomed:
            continue
        for line in _run(tool, "-w", "-t", table, "-S").splitlines():
            parts = line.split()
            if parts[:1] == ["-A"] and parts[1] not in doomed and _jumps_to(parts, doomed):
                _run(tool, "-w", "-t", table, "-D", *parts[1:], check=False)
        for chain in doomed:
            _run(tool, "-w", "-t", table, "-F", chain, check=False)
        for chain in doomed:
            _run(tool, "-w", "-t", table, "-X", chain, check=False)
        removed += [f"{key}:{c}" for c in doomed]
    return removed


def _jumps_to(parts: list[str], targets: list[str]) -> bool:
    return any(parts[i] in ("-j", "-g") and parts[i + 1] in targets for i in range(len(parts) - 1))


def teardown(state: Path) -> list[str]:
    """Undo `setup` and whatever the node's processes changed on the host; return what was removed."""
    record = load_record(state)
    if record is None:
        return []
    done = []
    if record.bridge and Path(f"/sys/class/net/{record.bridge}").exists():
        _run("ip", "link", "delete", record.bridge, check=False)
        done.append(f"interface {record.bridge}")
    done += remove_chains(record.chains)
    done += _remove_new_empty_tables(record.nft_tables)
    for key, value in record.sysctls.items():
        path = Path(f"/proc/sys/{key}")
        if path.read_text().strip() != value:
            path.write_text(value + "\n")
            done.append(f"sysctl {key}={value}")
    _remove_log_links(record)
    if "/var/run/netns" in record.absent_dirs:
        done += _unmount_netns_dir(Path("/var/run/netns").resolve())
    for d in record.absent_dirs:
        path = Path(d)
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
            done.append(f"dir {d}")
    _record_path(state).unlink(missing_ok=True)
    return done


def _unmount_netns_dir(netns: Path) -> list[str]:
    """containerd made the netns dir (absent before `up`) a shared bind mount of itself, holding the sandboxes'
    namespaces; a namespace mounted before that bind sits hidden under it. Unmount top-down until none is left,
    then remove the left-over namespace files (ours: the dir did not exist before)."""
    removed = []
    for _ in range(5):
        points = [
            ln.split()[4]
            for ln in Path("/proc/self/mountinfo").read_text().splitlines()
            if ln.split()[4] == str(netns) or ln.split()[4].startswith(f"{netns}/")
        ]
        if not points:
            break
        for point in sorted(points, key=len):  # the dir's own bind first: it may hide the others
            if subprocess.run(["umount", point], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True)
            removed.append(f"mount {point}")
    if netns.is_dir():
        for entry in netns.iterdir():
            if entry.name.startswith("cni-"):
                entry.unlink(missing_ok=True)
    return removed


def _remove_log_links(record: HostRecord) -> None:
    """The kubelet links each container's log into /var/log/containers: remove the links into our dirs."""
    links = Path("/var/log/containers")
    if not links.is_dir() or not record.pod_log_dirs:
        return
    for link in links.iterdir():
        if link.is_symlink() and any(str(link.readlink()).startswith(d) for d in record.pod_log_dirs):
            link.unlink()


def note_pod_log_dir(state: Path, path: Path) -> None:
    record = load_record(state)
    if record is not None and str(path) not in record.pod_log_dirs:
        record.pod_log_dirs.append(str(path))
        _save(state, record)

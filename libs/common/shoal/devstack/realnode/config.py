"""Config files and ProcessSpecs of a real node's processes, everything under `<state>/realnode/`.

Per node i (name `real-node-<i>`): containerd (own root, state, socket, CNI and registry config) and a
kubelet. Shared by the nodes: kube-proxy (iptables mode), CoreDNS (a host process on the gateway IP, behind
the kube-dns Service) and kube-scheduler (its default profile only places pods on real nodes, so pods of the
default scheduler never land on a fake node). Servers listen on 127.0.0.1, except what pods must reach: the
kubelet and CoreDNS listen on a node IP of the stack's bridge.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal.devstack import paths
from shoal.devstack.components import secure_serving
from shoal.devstack.procs import ProcessSpec, http_ok, port_open
from shoal.devstack.realnode import hostnet
from shoal.devstack.realnode.images import PAUSE_IMAGE

REAL_NODE_LABEL = "shoal.io/real-node"
CNI_PLUGINS = ("bridge", "host-local", "loopback")
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")


def root(state: Path) -> Path:
    return state / "realnode"


@dataclass(frozen=True)
class NodeDirs:
    """Where node `index` keeps its files."""

    state: Path
    index: int

    @property
    def name(self) -> str:
        return f"real-node-{self.index}"

    @property
    def base(self) -> Path:
        return root(self.state) / self.name

    @property
    def socket(self) -> Path:
        return self.base / "containerd" / "containerd.sock"

    @property
    def containerd_state(self) -> Path:
        return self.base / "containerd" / "state"

    @property
    def certs_d(self) -> Path:
        return self.base / "containerd" / "certs.d"

    @property
    def pod_logs(self) -> Path:
        return self.base / "pod-logs"

    @property
    def cgroup_root(self) -> str:
        return f"/shoal-{self.name}"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _write_json(path: Path, doc: dict[str, Any]) -> Path:
    """A config file as JSON (which YAML readers such as the kubelet's accept too)."""
    return _write(path, json.dumps(doc, indent=2))


def cni_bin_dir(state: Path) -> Path:
    """A bin dir the stack owns, linking Debian's bridge, host-local and loopback plugins."""
    out = root(state) / "cni-bin"
    out.mkdir(parents=True, exist_ok=True)
    for plugin in CNI_PLUGINS:
        found = next((Path(d) / plugin for d in CNI_BIN_DIRS if (Path(d) / plugin).is_file()), None)
        if found is None:
            from shoal.devstack.errors import DevStackError

            raise DevStackError(f"CNI plugin {plugin} not found: `apt-get install -y containernetworking-plugins`")
        link = out / plugin
        if not link.exists():
            link.symlink_to(found)
    return out


def containerd(node: NodeDirs) -> ProcessSpec:
    base = node.base / "containerd"
    start, end = hostnet.pod_range(node.index)
    cni_conf = _write_json(
        base / "net.d" / "10-shoal.conflist",
        {
            "cniVersion": "0.4.0",
            "name": "shoal",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": hostnet.BRIDGE,
                    # not the gateway: the stack gave the bridge its address, and a gateway bridge
                    # would turn on forwarding for the whole host
                    "isGateway": False,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [
                            [
                                {
                                    "subnet": hostnet.POD_NETWORK,
                                    "rangeStart": start,
                                    "rangeEnd": end,
                                    "gateway": hostnet.gateway_ip(),
                                }
                            ]
                        ],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(base / "ipam"),
                    },
                }
            ],
        },
    )
    node.certs_d.mkdir(parents=True, exist_ok=True)
    cfg = _write(
        base / "config.toml",
        f"""version = 2
root = "{base / 'root'}"
state = "{node.containerd_state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{node.socket}"
[ttrpc]
  address = "{node.socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin_dir(node.state)}"
    conf_dir = "{cni_conf.parent}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{node.certs_d}"
""",
    )
    return ProcessSpec(
        name=f"containerd-{node.index}",
        argv=["containerd", "--config", str(cfg), "--log-level", "warn"],
        ready=lambda: node.socket.is_socket(),
        ready_timeout_s=30,
    )


def trust_registry(certs_d: Path, host_port: str) -> Path:
    """Let containerd pull `host_port/...` images over plain HTTP (a registry on 127.0.0.1)."""
    return _write(
        certs_d / host_port / "hosts.toml",
        f'server = "http://{host_port}"\n\n[host."http://{host_port}"]\n  capabilities = ["pull", "resolve"]\n',
    )


def kubelet(
    node: NodeDirs, kubeconfig: Path, ca_cert: Path, ports: dict[str, int]
) -> ProcessSpec:
    healthz = ports[f"kubelet-{node.index}-healthz"]
    cfg = _write_json(
        node.base / "kubelet.yaml",
        {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": node.cgroup_root,
            "address": hostnet.node_ip(node.index),
            "port": ports[f"kubelet-{node.index}"],
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [hostnet.CLUSTER_DNS_IP],
            "clusterDomain": "cluster.local",
            "resolvConf": "",
            "podLogsDir": str(node.pod_logs),
            "containerRuntimeEndpoint": f"unix://{node.socket}",
            "failSwapOn": False,
            "oomScoreAdj": 0,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "serializeImagePulls": False,
            "volumePluginDir": str(node.base / "volume-plugins"),
            "staticPodPath": "",
            "nodeStatusReportFrequency": "10s",
        },
    )
    return ProcessSpec(
        name=f"kubelet-{node.index}",
        argv=[
            str(paths.k8s_bin("kubelet")),
            f"--config={cfg}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={node.base / 'kubelet'}",
            f"--cert-dir={node.base / 'kubelet-pki'}",
            f"--hostname-override={node.name}",
            f"--node-ip={hostnet.node_ip(node.index)}",
            f"--node-labels={REAL_NODE_LABEL}=true",
            "--v=1",
        ],
        ready=lambda: http_ok(f"http://127.0.0.1:{healthz}/healthz"),
        ready_timeout_s=60,
    )


def kube_proxy(state: Path, kubeconfig: Path, node_name: str, ports: dict[str, int]) -> ProcessSpec:
    healthz = ports["kube-proxy-healthz"]
    cfg = _write_json(
        root(state) / "kube-proxy.yaml",
        {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "mode": "iptables",
            "clusterCIDR": hostnet.POD_NETWORK,
            "hostnameOverride": node_name,
            "bindAddress": "127.0.0.1",
            "healthzBindAddress": f"127.0.0.1:{healthz}",
            "metricsBindAddress": f"127.0.0.1:{ports['kube-proxy-metrics']}",
            "nodePortAddresses": [f"{hostnet.gateway_ip()}/32"],
            "oomScoreAdj": 0,
            "iptables": {"localhostNodePorts": False, "syncPeriod": "30s", "minSyncPeriod": "0s"},
            # 0: leave the host's conntrack sysctls as they are
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        },
    )
    return ProcessSpec(
        name="kube-proxy",
        argv=[str(paths.k8s_bin("kube-proxy")), f"--config={cfg}", "--v=1"],
        ready=lambda: http_ok(f"http://127.0.0.1:{healthz}/livez"),
        ready_timeout_s=60,
    )


def kube_proxy_cleanup() -> list[str]:
    """The command that removes kube-proxy's rules (run after it stopped)."""
    return [str(paths.k8s_bin("kube-proxy")), "--cleanup", "--v=0"]


def coredns(state: Path, kubeconfig: Path, ports: dict[str, int]) -> ProcessSpec:
    """CoreDNS on the gateway IP, answering cluster.local only (no forwarding: nothing else is asked)."""
    ready = ports["coredns-ready"]
    corefile = _write(
        root(state) / "Corefile",
        f""".:{ports['coredns']} {{
    bind {hostnet.gateway_ip()}
    errors
    ready 127.0.0.1:{ready}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        ttl 5
    }}
    cache 5
}}
""",
    )
    return ProcessSpec(
        name="coredns",
        argv=[str(paths.coredns_bin()), "-conf", str(corefile)],
        ready=lambda: http_ok(f"http://127.0.0.1:{ready}/ready"),
        ready_timeout_s=60,
    )


def kube_scheduler(state: Path, kubeconfig: Path, ports: dict[str, int]) -> ProcessSpec:
    port = ports["kube-scheduler"]
    only_real = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": REAL_NODE_LABEL, "operator": "In", "values": ["true"]}]}
            ]
        }
    }
    cfg = _write_json(
        root(state) / "kube-scheduler.yaml",
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "leaderElection": {"leaderElect": False},
            "profiles": [
                {
                    "schedulerName": "default-scheduler",
                    "pluginConfig": [{"name": "NodeAffinity", "args": {"addedAffinity": only_real}}],
                }
            ],
        },
    )
    return ProcessSpec(
        name="kube-scheduler",
        argv=[
            str(paths.k8s_bin("kube-scheduler")),
            f"--config={cfg}",
            *secure_serving(kubeconfig, port),
            "--v=1",
        ],
        ready=lambda: port_open(port),
        ready_timeout_s=60,
    )

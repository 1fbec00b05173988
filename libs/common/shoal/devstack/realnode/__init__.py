"""Real nodes for the local stack: kubelet + containerd per node, kube-proxy, CoreDNS and kube-scheduler,
pods in their own network namespaces on a bridge the stack creates (`shoal dev up --real-node`).

    names = start(state, kubeconfig, pki, ports, count=1)   # Ready nodes advertising fake GPUs
    trust_registry(state, "127.0.0.1:5000")                  # containerd pulls from it over plain HTTP
    stop(state)                                              # processes, pods, mounts, cgroups, host changes

Needs root, containerd + runc, containernetworking-plugins, iptables and gcc. See docs/devstack.md.
"""

from __future__ import annotations

from shoal.devstack.realnode import hostnet
from shoal.devstack.realnode.config import REAL_NODE_LABEL
from shoal.devstack.realnode.images import PAUSE_IMAGE, PROBE_IMAGE, import_image, probe_image
from shoal.devstack.realnode.node import component_names, is_component, start, stop, trust_registry

__all__ = [
    "PAUSE_IMAGE",
    "PROBE_IMAGE",
    "REAL_NODE_LABEL",
    "component_names",
    "hostnet",
    "import_image",
    "is_component",
    "probe_image",
    "start",
    "stop",
    "trust_registry",
]

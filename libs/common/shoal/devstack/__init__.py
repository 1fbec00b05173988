"""The real local stack for development and tests: etcd, kube-apiserver, kube-controller-manager, a fake
kubelet with fake GPU nodes, Kafka (KRaft) and Redis, all on 127.0.0.1, built or fetched once into a cache.

    from shoal.devstack import up, down, StackInfo
    info = up(Path("/tmp/stack"))          # starts everything, returns how to reach it
    down(Path("/tmp/stack"))               # stops every process by pid and removes the state

See docs/devstack.md.
"""

from __future__ import annotations

from shoal.devstack.binaries import ensure_binaries
from shoal.devstack.errors import DevStackError
from shoal.devstack.procs import ProcessSpec, start_process, stop_process
from shoal.devstack.stack import StackInfo, down, start_extra, status, up

__all__ = [
    "DevStackError",
    "ProcessSpec",
    "StackInfo",
    "down",
    "ensure_binaries",
    "start_extra",
    "start_process",
    "status",
    "stop_process",
    "up",
]

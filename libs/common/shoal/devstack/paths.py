"""Where the dev stack keeps its cached binaries and its per-run state, and which versions it uses."""

from __future__ import annotations

import os
from pathlib import Path

ETCD_VERSION = os.environ.get("SHOAL_ETCD_VERSION", "v3.6.16")
K8S_VERSION = os.environ.get("SHOAL_K8S_VERSION", "v1.36.3")
KAFKA_VERSION = os.environ.get("SHOAL_KAFKA_VERSION", "4.1.1")
COREDNS_VERSION = os.environ.get("SHOAL_COREDNS_VERSION", "v1.14.7")

SCRIPTS_DIR = Path(__file__).resolve().parent / "sh"
REPO = Path(__file__).resolve().parents[4]  # the checkout: services/, deploy/, libs/


def cache_dir() -> Path:
    """`$SHOAL_CACHE`, else `$XDG_CACHE_HOME/shoal`, else `~/.cache/shoal` (the build scripts agree)."""
    if os.environ.get("SHOAL_CACHE"):
        return Path(os.environ["SHOAL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shoal"


def default_state_dir() -> Path:
    """State of the stack `shoal dev up` starts: outside the repository."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "shoal" / "dev"


def etcd_bin() -> Path:
    return cache_dir() / "bin" / f"etcd-{ETCD_VERSION}" / "etcd"


def coredns_bin() -> Path:
    return cache_dir() / "bin" / f"coredns-{COREDNS_VERSION}" / "coredns"


def k8s_bin(name: str) -> Path:
    """One of kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, kube-proxy."""
    return cache_dir() / "bin" / f"k8s-{K8S_VERSION}" / name


def kafka_libs() -> Path:
    return cache_dir() / f"kafka-{KAFKA_VERSION}" / "libs"

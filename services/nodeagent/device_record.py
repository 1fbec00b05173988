"""The fake device plugin's allocation record: which GPUs each whole-GPU pod holds, kept on the node.

On a real node the NVIDIA device plugin hands a pod its GPUs and the kubelet keeps that allocation in a
checkpoint file on the node (`/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint`); nothing is
written to the apiserver. In fake mode the agent plays the device plugin, so it keeps the same kind of
record: one small JSON file per node in `SHOAL_FAKE_DEVICE_DIR` (pod uid → GPU uuids), written atomically
when an allocation is made or a pod's is released. A restarted agent reads it back and moves nothing.

Without a directory the record stays in the agent's memory and each allocation is also written to the pod
as the `shoal.io/gpu-devices` annotation (the cluster keeps it across restarts); an annotation found on a
pod is honoured either way.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from shoal.logging import get_logger

log = get_logger(__name__)

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


class DeviceRecord:
    """Per node: pod uid → the GPUs the fake device plugin gave it."""

    def __init__(self, directory: str | os.PathLike[str] | None) -> None:
        self.directory = Path(directory) if directory else None
        self._nodes: dict[str, dict[str, tuple[str, ...]]] = {}

    @property
    def on_disk(self) -> bool:
        return self.directory is not None

    def _path(self, node: str) -> Path:
        assert self.directory is not None
        return self.directory / f"{_SAFE.sub('_', node)}.json"

    def of(self, node: str) -> Mapping[str, tuple[str, ...]]:
        """The node's allocations (read from its file the first time this process asks)."""
        held = self._nodes.get(node)
        if held is None:
            held = self._nodes[node] = self._load(node)
        return held

    def _load(self, node: str) -> dict[str, tuple[str, ...]]:
        if self.directory is None:
            return {}
        path = self._path(node)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:  # a torn or foreign file: start the node's record afresh
            log.warning("device_record_unreadable", node=node, path=str(path), error=str(exc))
            return {}
        pods = doc.get("pods") if isinstance(doc, dict) and doc.get("node") == node else None
        if not isinstance(pods, dict):
            log.warning("device_record_unreadable", node=node, path=str(path), error="not a record of this node")
            return {}
        return {str(uid): tuple(str(g) for g in gpus) for uid, gpus in pods.items()
                if isinstance(gpus, list) and gpus}

    def update(self, node: str, assigned: Mapping[str, tuple[str, ...]], live: Iterable[str]) -> bool:
        """Add the new allocations and drop those of pods no longer active on the node; True if it changed
        (then the node's file is rewritten, atomically)."""
        current = self.of(node)
        keep = set(live)
        gone = [uid for uid in current if uid not in keep]
        new = {uid: gpus for uid, gpus in assigned.items() if current.get(uid) != gpus}
        if not gone and not new:
            return False  # the usual tick: nothing to copy or write
        held = {uid: gpus for uid, gpus in current.items() if uid in keep} | new
        self._nodes[node] = held
        if self.directory is not None:
            self._write(node, held)
        return True

    def forget(self, node: str) -> None:
        """The node is no longer served by this agent: drop it from memory (its file stays for a successor)."""
        self._nodes.pop(node, None)

    def _write(self, node: str, held: Mapping[str, tuple[str, ...]]) -> None:
        assert self.directory is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(node)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        body = {"node": node, "pods": {uid: list(gpus) for uid, gpus in sorted(held.items())}}
        tmp.write_text(json.dumps(body, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, path)

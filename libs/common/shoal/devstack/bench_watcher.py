"""The benchmark's watcher, a process of its own: it sees pods bound, apart from the event loop creating them.

    python -m shoal.devstack.bench_watcher --kubeconfig K --namespace NS --out FILE

It lists then watches the pods of one namespace and appends JSON lines to FILE: `{"ready": t}` once the first
list is in, then `{"pod": name, "bound": t, "node": n}` the first time a pod is seen with a node. `t` is
`time.monotonic()`, which on Linux is one clock for every process, so the creator's timestamps compare.
It runs until stopped (SIGTERM). The parent reads the file with `BoundLog`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import IO

from shoal.core.fields import text, value_at
from shoal.devstack.procs import ProcessSpec


class BoundLog:
    """The parent's view of a watcher's file: read what was appended since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.ready_at: float | None = None
        self.bound: dict[str, float] = {}
        self._partial = b""

    def poll(self) -> int:
        """Read new lines; return how many pods are known bound."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return len(self.bound)
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            if "ready" in record:
                self.ready_at = float(record["ready"])
            elif "pod" in record:
                self.bound.setdefault(record["pod"], float(record["bound"]))
        return len(self.bound)

    def is_ready(self) -> bool:
        self.poll()
        return self.ready_at is not None

    async def wait_for(self, names: set[str], timeout_s: float, period_s: float = 0.1) -> bool:
        """Until every pod in `names` is bound (True) or `timeout_s` passes (False)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            if names <= self.bound.keys():
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(period_s)


def watcher_spec(kubeconfig: str, namespace: str, out: Path, log: BoundLog) -> ProcessSpec:
    argv = [sys.executable, "-m", "shoal.devstack.bench_watcher", "--kubeconfig", kubeconfig,
            "--namespace", namespace, "--out", str(out)]
    return ProcessSpec(name=f"bench-watcher-{namespace}", argv=argv, env={"PYTHONUNBUFFERED": "1"},
                       ready=log.is_ready, ready_timeout_s=60.0)


def _write(out: IO[str], record: dict) -> None:
    out.write(json.dumps(record) + "\n")


async def watch(kubeconfig: str, namespace: str, out: IO[str]) -> None:
    from shoal.adapters import kube as k
    from shoal.adapters.kube_watch import ListWatch
    from shoal.settings import KubeSettings

    api = await k.connect_kube(KubeSettings(kubeconfig=kubeconfig))
    seen: set[str] = set()
    try:
        async for event in ListWatch(k.Kube(api), k.PODS, namespace=namespace, timeout_s=60):
            now = time.monotonic()
            objects = event.objects if event.type == "SYNCED" else [event.object or {}]
            for obj in objects:
                name = text(obj, "metadata", "name")
                node = value_at(obj, "spec", "nodeName")
                if node and name not in seen:
                    seen.add(name)
                    _write(out, {"pod": name, "bound": now, "node": node})
            if event.type == "SYNCED" and event.reason == "initial":
                _write(out, {"ready": now})
            out.flush()
    finally:
        await api.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shoal.devstack.bench_watcher")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    with open(args.out, "a", encoding="utf-8") as out:
        try:
            asyncio.run(watch(args.kubeconfig, args.namespace, out))
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

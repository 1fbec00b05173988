"""The benchmark's watcher, a process of its own: it sees pods bound, apart from the event loop creating them.

    python -m shoal.devstack.bench_watcher --kubeconfig K --namespace NS --out FILE

It lists then watches the pods of one namespace and appends JSON lines to FILE: `{"ready": t}` once the first
list is in, then `{"pod": name, "bound": t, "node": n}` the first time a pod is seen with a node; and, from a
watch of the namespace's PodGroups, `{"group": name, "at": t}` the first time each is seen. `t` is
`time.monotonic()`, which on Linux is one clock for every process, so the creator's timestamps compare.
It runs until stopped (SIGTERM). The parent reads the file with `BoundLog`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from shoal.core.fields import text, value_at
from shoal.devstack.procs import ProcessSpec


class BoundLog:
    """The parent's view of a watcher's file: read what was appended since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.ready_at: float | None = None
        self.bound: dict[str, float] = {}
        self.groups: dict[str, float] = {}  # PodGroup → when first seen
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
            elif "group" in record:
                self.groups.setdefault(record["group"], float(record["at"]))
        return len(self.bound)

    def is_ready(self) -> bool:
        self.poll()
        return self.ready_at is not None

    async def wait_for(self, names: set[str], timeout_s: float, period_s: float = 0.1) -> bool:
        """Until every pod in `names` is bound (True) or `timeout_s` passes (False)."""
        return await self._until(lambda: names <= self.bound.keys(), timeout_s, period_s)

    async def wait_for_groups(self, count: int, timeout_s: float, period_s: float = 0.1) -> bool:
        """Until `count` PodGroups have been seen (True) or `timeout_s` passes (False)."""
        return await self._until(lambda: len(self.groups) >= count, timeout_s, period_s)

    async def _until(self, done: Callable[[], bool], timeout_s: float, period_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            if done():
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
    from shoal.settings import KubeSettings

    api = await k.connect_kube(KubeSettings(kubeconfig=kubeconfig), component="bench-watcher")
    try:
        await asyncio.gather(_pods(k.Kube(api), namespace, out), _groups(k.Kube(api), namespace, out))
    finally:
        await api.close()


async def _pods(kube: Any, namespace: str, out: IO[str]) -> None:
    from shoal.adapters import kube as k
    from shoal.adapters.kube_watch import ListWatch

    seen: set[str] = set()
    async for event in ListWatch(kube, k.PODS, namespace=namespace, timeout_s=60):
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


async def _groups(kube: Any, namespace: str, out: IO[str]) -> None:
    """Each PodGroup of the namespace, the first time it is seen (none when the CRD is not installed)."""
    from shoal.adapters import kube as k
    from shoal.adapters.kube_watch import ListWatch

    seen: set[str] = set()
    try:
        async for event in ListWatch(kube, k.PODGROUPS, namespace=namespace, timeout_s=60):
            now = time.monotonic()
            for obj in event.objects if event.type == "SYNCED" else [event.object or {}]:
                name = text(obj, "metadata", "name")
                if name and name not in seen and event.type != "DELETED":
                    seen.add(name)
                    _write(out, {"group": name, "at": now})
            out.flush()
    except Exception as exc:  # noqa: BLE001 - the pods' watch is the benchmark's; this one only adds to it
        print(f"bench watcher: PodGroups not watched: {exc}", file=sys.stderr, flush=True)


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

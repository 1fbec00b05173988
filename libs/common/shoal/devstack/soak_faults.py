"""The soak's Shoal services and the faults it injects into them and into the stack.

    services = Services(state_dir, info, tag="sk1a2b3c", pool="sk1a2b3c-pool")
    await services.start_all()
    record = await inject("kill", services, info.state_dir, rng)   # kill -9 a random service, start it again
    record = await inject("kafka", services, info.state_dir, rng)  # stop Kafka by pid, start it on its data
    services.stop_all()

Faults: `kill` (SIGKILL of one of SOAK_SERVICES at random, then the same spec launched again), `kafka`, `redis`
(an empty Redis: it runs without persistence), `apiserver` (stop + start on the same port and etcd; every watch
breaks). Each component stays down HOLD_DOWN_S. A record says what was hit and how long it took to be ready.
Processes are launched from the calling (main) thread, so a tied child dies with the soak, not with a worker.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

from shoal.devstack.bench_contenders import SHOAL_SERVICES, shoal_env
from shoal.devstack.procs import ProcessSpec, alive, launch, read_pid, stop_processes, wait_ready
from shoal.devstack.restart import component_spec, start_component, stop_component

FAULTS = ("kill", "kafka", "redis", "apiserver")
COMPONENTS = {"kafka": "kafka", "redis": "redis", "apiserver": "kube-apiserver"}
SOAK_SERVICES = SHOAL_SERVICES
HOLD_DOWN_S = 5.0
# faster failure detection than the defaults, as in the e2e fault tests: a killed consumer's partitions move on
# within seconds, a killed binder's leases (in-flight binds) run out in half a minute
FAULT_ENV = {"SHOAL_KAFKA_SESSION_TIMEOUT_MS": "6000", "SHOAL_KAFKA_HEARTBEAT_INTERVAL_MS": "500",
             "SHOAL_RESERVATION_SYNC_S": "2", "SHOAL_INFLIGHT_TTL_S": "30", "SHOAL_LOG_LEVEL": "INFO"}


class Services:
    """Shoal's scheduling services for one soak: own topic prefix, shard prefix and fake-node selector."""

    def __init__(self, state_dir: Path, info: Any, *, tag: str, pool: str) -> None:
        from shoal.devstack.scheduler import service_spec

        self.state = state_dir
        self.env = {**shoal_env(info.env(), tag, pool), **FAULT_ENV}
        self.topic_prefix = self.env["SHOAL_TOPIC_PREFIX"]
        self.specs: dict[str, ProcessSpec] = {name: service_spec(name, self.env, state_dir=state_dir)
                                                 for name in SOAK_SERVICES}
        self.pids: dict[str, int] = {}
        self.restarts: dict[str, int] = dict.fromkeys(SOAK_SERVICES, 0)

    async def start(self, name: str) -> float:
        """Launch `name` (from this thread) and wait until it is ready; the seconds it took."""
        began = time.monotonic()
        spec = self.specs[name]
        self.pids[name] = launch(self.state, spec, tie_to_parent=True)
        await asyncio.to_thread(wait_ready, self.state, spec, self.pids[name])
        return time.monotonic() - began

    async def start_all(self) -> None:
        for name in SOAK_SERVICES:
            spec = self.specs[name]
            self.pids[name] = launch(self.state, spec, tie_to_parent=True)
        for name in SOAK_SERVICES:
            await asyncio.to_thread(wait_ready, self.state, self.specs[name], self.pids[name])

    async def kill(self, name: str) -> None:
        """SIGKILL, then wait (reaping it) until the process is gone."""
        pid = self.pids[name]
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done == pid or not Path(f"/proc/{pid}").exists():
                return
            await asyncio.sleep(0.05)

    def dead(self) -> list[str]:
        """The services whose recorded process is no longer running (a zombie counts as dead)."""
        out = []
        for name, spec in self.specs.items():
            found = read_pid(self.state, spec.name)
            if name in self.pids and (found is None or not alive(*found)):
                out.append(name)
        return out

    def log(self, name: str) -> Path:
        return self.state / "logs" / f"{self.specs[name].name}.log"

    def stop_all(self) -> None:
        stop_processes(self.state, [spec.name for spec in self.specs.values()])


async def restart_stack_component(state_dir: str, name: str, *, hold_down_s: float = HOLD_DOWN_S) -> dict[str, float]:
    """Stop a core component of the stack by pid, keep it down `hold_down_s`, start it on the same ports/data.

    The stack outlives the soak (`shoal dev up`), so the new process is not tied to this one."""
    spec = component_spec(state_dir, name)
    stopping = time.monotonic()
    await asyncio.to_thread(stop_component, state_dir, name)
    stopped = time.monotonic()
    await asyncio.sleep(hold_down_s)
    launched = time.monotonic()
    pid = start_component(state_dir, spec)
    await asyncio.to_thread(wait_ready, Path(state_dir), spec, pid)
    ready = time.monotonic()
    return {"stop_s": round(stopped - stopping, 2), "start_to_ready_s": round(ready - launched, 2),
            "down_s": round(ready - stopping, 2)}


async def inject(kind: str, services: Services, state_dir: str, rng: random.Random) -> dict[str, Any]:
    """One fault; returns {kind, target, at (monotonic), down_s, ...}. Raises what the restart raised."""
    at = time.monotonic()
    if kind == "kill":
        target = rng.choice(SOAK_SERVICES)
        await services.kill(target)
        services.restarts[target] += 1
        ready_s = await services.start(target)
        return {"kind": kind, "target": target, "at": at, "down_s": round(time.monotonic() - at, 2),
                "start_to_ready_s": round(ready_s, 2)}
    if kind not in COMPONENTS:
        raise ValueError(f"unknown fault {kind!r}; choose from {', '.join(FAULTS)}")
    figures = await restart_stack_component(state_dir, COMPONENTS[kind])
    return {"kind": kind, "target": COMPONENTS[kind], "at": at, **figures}


def plan_faults(kinds: tuple[str, ...], duration_s: float, every_s: float, *, first_s: float,
                quiet_tail_s: float) -> list[tuple[float, str]]:
    """(offset s, kind) for each fault: the first at `first_s`, then every `every_s`, the kinds in rotation,
    none in the last `quiet_tail_s` (the stack recovers before the settle)."""
    out: list[tuple[float, str]] = []
    t = first_s
    while kinds and every_s > 0 and t <= duration_s - quiet_tail_s:
        out.append((t, kinds[len(out) % len(kinds)]))
        t += every_s
    return out

"""End-to-end fixtures: Shoal's services as separate processes on the real stack.

The services start once per test session with their own Kafka topic prefix; each test works in its
own node pool (= shard), namespace and queue, so tests do not see each other's decisions.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio


@dataclass
class Services:
    state_dir: Path
    topic_prefix: str
    pids: dict[str, int]

    def log(self, name: str) -> str:
        path = self.state_dir / "logs" / f"shoal-{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(scope="session")
def shoal(stack: Any) -> Iterator[Services]:
    """snapshotter, fairshare, planner, binder and nodeagent running against the stack (session scope)."""
    yield from _services(stack)


def _services(stack: Any) -> Iterator[Services]:
    from shoal.devstack.errors import DevStackError
    from shoal.devstack.scheduler import SERVICES, install_base, start_services, stop_services

    asyncio.run(install_base(stack.kubeconfig))
    state = Path(tempfile.mkdtemp(prefix="shoal-services-"))
    prefix = f"e{uuid.uuid4().hex[:8]}."
    env = {**stack.env(), "SHOAL_TOPIC_PREFIX": prefix, "SHOAL_LOG_LEVEL": "INFO",
           "SHOAL_KAFKA_SESSION_TIMEOUT_MS": "6000", "SHOAL_KAFKA_HEARTBEAT_INTERVAL_MS": "500",
           "SHOAL_RESERVATION_TIMEOUT_S": "20", "SHOAL_SHARD_PREFIX": "pool-",
           "SHOAL_START_TIMEOUT_S": "120",  # a loaded machine may take longer than the default 30 s to answer
           "SHOAL_RESERVATION_SYNC_S": "1", "SHOAL_RESERVATION_GRACE_S": "2",
           # GPU sharing modes per node pool (KAI v0.18, test_kai18_sharing_modes); other pools: NonMemoryEnforced
           "SHOAL_POOL_GPU_SHARING_MODES": "pool-k18b-nvf=NvFractions,pool-k18b-hami=HamiCore,pool-k18b-off=Disabled",
           # nodes labelled shoal.io/isolated belong to a test that runs its own services (test_faults)
           "SHOAL_FAKE_NODE_SELECTOR": "shoal.io/fake-node=true,!shoal.io/isolated"}
    try:
        pids = start_services(state, env, tie_to_parent=True)
    except DevStackError as exc:
        stop_services(state, [f"shoal-{n}" for n in SERVICES])
        pytest.fail(f"Shoal services failed to start: {exc}", pytrace=False)
    services = Services(state_dir=state, topic_prefix=prefix, pids=pids)
    try:
        yield services
    finally:
        stop_services(state, list(pids))


@pytest_asyncio.fixture
async def kube(kube_api: Any) -> Any:
    """Shoal's own Kubernetes adapter on the test client (plain dicts)."""
    from shoal.adapters.kube import Kube

    return Kube(kube_api)


@pytest_asyncio.fixture
async def queue(kube: Any, node_pool: str) -> AsyncIterator[str]:
    """A top-level queue with unlimited quota and limit for every resource, deleted after the test."""
    from shoal.adapters.kube import QUEUES

    name = f"q-{node_pool}"
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    await kube.create(QUEUES, {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
                               "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}})
    try:
        yield name
    finally:
        await kube.delete(QUEUES, name)


@pytest_asyncio.fixture
async def queues(kube: Any, node_pool: str) -> AsyncIterator[Any]:
    """A per-test queue tree (`await queues.add("q", gpu={...})`), every queue deleted afterwards."""
    from scenario_helpers import queue_tree

    async with queue_tree(kube, node_pool) as tree:
        yield tree

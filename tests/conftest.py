"""Fixtures shared by the whole suite.

The real local stack (etcd, kube-apiserver, kube-controller-manager, fake kubelet, Kafka, Redis) is started
once per run, only when a selected test asks for `stack` (directly or through another fixture), in a temp
state dir, and stopped by pid at the end. Set SHOAL_KUBECONFIG, SHOAL_KAFKA_BOOTSTRAP and SHOAL_REDIS_URL (as
printed by `shoal dev up`) to attach to a running stack instead. A stack that cannot start is a test error
with the reason, never a skip.

Fixtures: stack (session), kube_api, namespace, topic_prefix, node_pool, gpu_nodes (function scope), and
real_node_stack (session): a second stack with a real node (kubelet + containerd), for the tests that run real
pods; it needs root, and its teardown fails the run if `down` left a process, mount, interface or chain.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

STACK_FIXTURE = "stack"
_BUILD_ERROR = pytest.StashKey[str]()


def _uses_stack(item: pytest.Item) -> bool:
    return STACK_FIXTURE in getattr(item, "fixturenames", ())


@contextlib.contextmanager
def _uncaptured(config: pytest.Config) -> Iterator[None]:
    """Let progress lines reach the terminal while pytest captures output."""
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        yield
        return
    with capman.global_and_fixture_disabled():
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests that use the stack, and build a cold cache now, before any test's timeout starts."""
    from shoal.devstack.bytecode import ensure_bytecode

    ensure_bytecode()  # the service processes tests launch start from bytecode (PYTHONDONTWRITEBYTECODE=1)
    needing = [item for item in items if _uses_stack(item)]
    for item in needing:
        item.add_marker(pytest.mark.stack)
    if not needing or os.environ.get("SHOAL_KUBECONFIG"):
        return
    from shoal.devstack import DevStackError, ensure_binaries
    from shoal.devstack.binaries import missing_parts

    if not missing_parts():
        return
    with _uncaptured(config):
        try:
            ensure_binaries(lambda msg: print(msg, file=sys.stderr, flush=True))
        except DevStackError as exc:
            # the `stack` fixture reports it as the error of each test that needs the stack
            config.stash[_BUILD_ERROR] = str(exc)


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The running stack: `.kubeconfig`, `.kafka_bootstrap`, `.redis_url`, `.state_dir` (a StackInfo)."""
    from shoal.devstack import DevStackError, StackInfo, down, up

    problem = ""
    try:
        attached = StackInfo.from_env()
    except DevStackError as exc:
        problem = f"cannot attach to the stack: {exc}"
    if problem:
        pytest.fail(problem, pytrace=False)
    if attached is not None:
        yield attached
        return
    build_error = request.config.stash.get(_BUILD_ERROR, None)
    if build_error:
        pytest.fail(f"local stack binaries could not be built: {build_error}", pytrace=False)
    state = Path(os.environ.get("SHOAL_TEST_STATE_DIR") or tempfile.mkdtemp(prefix="shoal-stack-"))
    atexit.register(down, state)  # also when the session ends without fixture teardown
    try:
        with _uncaptured(request.config):
            info = up(state, tie_to_parent=True, say=lambda msg: print(msg, file=sys.stderr, flush=True))
    except DevStackError as exc:
        problem = f"local stack failed to start: {exc}"
    if problem:
        down(state)
        pytest.fail(problem, pytrace=False)
    try:
        yield info
    finally:
        down(state)


@pytest.fixture(scope="session")
def real_node_stack(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A stack of its own with one real node `real-node-1` (8 fake GPUs, pool `default`): a StackInfo.
    Stopped with `down` at the end, which must leave the host as it found it (checked)."""
    from shoal.devstack import DevStackError, down, up
    from shoal.devstack.realnode import leftovers
    from shoal.devstack.stack import RealNodeOptions

    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("a real node needs root, and CI runs as root", pytrace=False)
        pytest.skip("a real node needs root (bridge, iptables, mounts, cgroups)")
    state = Path(tempfile.mkdtemp(prefix="shoal-realnode-"))
    before = leftovers.snapshot()
    atexit.register(down, state)
    problem = ""
    try:
        with _uncaptured(request.config):
            info = up(
                state,
                tie_to_parent=True,
                real_node=RealNodeOptions(count=1, gpus=8),
                say=lambda msg: print(msg, file=sys.stderr, flush=True),
            )
    except DevStackError as exc:
        problem = f"stack with a real node failed to start: {exc}"
    if problem:
        down(state)
        pytest.fail(problem, pytrace=False)
    pids = dict(info.pids)
    try:
        yield info
    finally:
        down(state)
        for _ in range(30):  # a killed process may take a moment to go
            left = leftovers.compare(before, leftovers.snapshot(), pids, state)
            if not left:
                break
            time.sleep(0.1)
        assert not left, f"`down` left these behind: {left}"


@pytest_asyncio.fixture
async def kube_api(stack: Any) -> AsyncIterator[Any]:
    """A kubernetes_asyncio ApiClient for the stack's apiserver (admin), closed after the test."""
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    await config.load_kube_config(config_file=stack.kubeconfig, client_configuration=cfg)
    api = client.ApiClient(cfg)
    try:
        yield api
    finally:
        await api.close()


@pytest_asyncio.fixture
async def namespace(kube_api: Any) -> AsyncIterator[str]:
    """A fresh namespace `t-<8 hex>`; deleted after the test (without waiting for it to go)."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(kube_api)
    await core.create_namespace({"metadata": {"name": name, "labels": {"shoal.io/test": "true"}}})
    try:
        yield name
    finally:
        with contextlib.suppress(ApiException):
            await core.delete_namespace(name, _preload_content=False)


@pytest.fixture
def topic_prefix() -> str:
    """A per-test prefix for Kafka topic names, e.g. `t1a2b3c4d.`."""
    return f"t{uuid.uuid4().hex[:8]}."


@pytest.fixture
def node_pool() -> str:
    """A per-test node-pool name (value of `kai.scheduler/node-pool`), e.g. `pool-1a2b3c4d`."""
    return f"pool-{uuid.uuid4().hex[:8]}"


GpuNodeFactory = Callable[..., Awaitable[list[str]]]


@pytest_asyncio.fixture
async def gpu_nodes(kube_api: Any, node_pool: str) -> AsyncIterator[GpuNodeFactory]:
    """`await gpu_nodes(count=2, gpus=8, ...)` creates fake GPU nodes in this test's `node_pool`.

    Keyword arguments are those of shoal.devstack.nodes.create_gpu_nodes (gpus, gpu_memory_mib, gpu_product,
    cpu, memory, pods, labels, taints, pool); `names=[...]` overrides the generated `<pool>-n<i>` names.
    Returns the node names; every node it created is deleted after the test.
    """
    from shoal.devstack.nodes import create_gpu_nodes, delete_nodes

    created: list[str] = []

    async def make(
        count: int = 1,
        *,
        names: Sequence[str] | None = None,
        pool: str | None = None,
        labels: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        pool = pool or node_pool
        if names is None:
            names = [f"{pool}-n{len(created) + i}" for i in range(1, count + 1)]
        made = await create_gpu_nodes(kube_api, names, pool=pool, labels=labels, **kwargs)
        created.extend(made)
        return made

    try:
        yield make
    finally:
        await delete_nodes(kube_api, created)

"""The node agent keeps assigning GPUs to reservation pods while Kafka is unreachable.

A telemetry send waits as long as the broker is down (aiokafka retries it); it used to be awaited inside the
tick, so reservation pods went without their GPU until the binder gave up on them (seen when Kafka restarted
mid-burst, tests/e2e/test_faults_kafka.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client
from test_nodeagent import annotation, create_pod, one_node, pod_body, rsv, settings  # noqa: F401 - rsv: fixture

from services.nodeagent.app import NodeAgentApp
from services.nodeagent.binding import RESERVE_ANNOTATION


class StuckPublisher:
    """A publisher whose sends never finish, like aiokafka's while the broker is down."""

    def __init__(self) -> None:
        self.sends = 0
        self.cancelled = 0

    async def publish(self, topic: str, message: object, *, key: str | None = None) -> tuple[int, int]:
        self.sends += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return 0, 0


async def test_ticks_go_on_while_telemetry_cannot_be_sent(kube_api: Any, namespace: str, rsv: str,  # noqa: F811
                                                         node_pool: str, gpu_nodes: Any) -> None:
    core = client.CoreV1Api(kube_api)
    node = await one_node(gpu_nodes)
    publisher = StuckPublisher()
    app = NodeAgentApp(settings(rsv, node_pool, telemetry_period_s=1.0), kube_api, publisher=publisher)
    try:
        await create_pod(core, rsv, pod_body("r1", node, labels={"runai-gpu-group": "g1"}))
        await asyncio.wait_for(app.tick(0.0), timeout=15)
        assert await annotation(core, rsv, "r1", RESERVE_ANNOTATION)
        await create_pod(core, rsv, pod_body("r2", node, labels={"runai-gpu-group": "g2"}))
        await asyncio.wait_for(app.tick(5.0), timeout=15)  # a period later: the first send still hangs
        assert await annotation(core, rsv, "r2", RESERVE_ANNOTATION)
        assert publisher.sends == 1, "one outstanding send per node; later samples are dropped meanwhile"
    finally:
        app.close()
        await asyncio.sleep(0)
    assert publisher.cancelled == 1

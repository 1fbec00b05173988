"""`python -m services.nodeagent` / `shoal-nodeagent`: settings → logging → run."""

from __future__ import annotations

import asyncio
import contextlib
import signal

from aiohttp import web
from kubernetes_asyncio import client, config

from services.nodeagent.app import NodeAgentApp
from services.nodeagent.config import NodeAgentSettings
from shoal.adapters.kafka import Publisher, ensure_topics
from shoal.errors import ShoalError
from shoal.logging import configure_logging, get_logger
from shoal.messages.topics import GPU_USAGE
from shoal.settings import redacted, settings_or_exit

log = get_logger("services.nodeagent")


async def _api_client(settings: NodeAgentSettings) -> client.ApiClient:
    cfg = client.Configuration()
    if settings.kube.in_cluster:
        config.load_incluster_config(client_configuration=cfg)
    else:
        await config.load_kube_config(config_file=settings.kube.kubeconfig, context=settings.kube.context,
                                      client_configuration=cfg)
    return client.ApiClient(cfg)


async def run(settings: NodeAgentSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    api = await _api_client(settings)
    publisher = Publisher(settings.kafka) if settings.publish_telemetry else None
    app = NodeAgentApp(settings, api, publisher=publisher)
    runner = web.AppRunner(app.http_app())
    await runner.setup()
    await web.TCPSite(runner, settings.http.host, settings.http.port).start()
    try:
        if publisher is not None:
            topic = GPU_USAGE.full(settings.topic_prefix)
            try:
                await ensure_topics(settings.kafka, [topic], partitions=GPU_USAGE.partitions)
                await publisher.start()
            except ShoalError as exc:  # no Kafka: police and serve metrics anyway, without GpuUsage messages
                log.error("telemetry_disabled", error=str(exc))
                app.publisher = publisher = None
        log.info("nodeagent_started", settings=redacted(settings))
        await app.run(stop)
    finally:
        if publisher is not None:
            with contextlib.suppress(Exception):
                await publisher.stop()
        app.close()
        await runner.cleanup()
        await api.close()


def main() -> None:
    settings = settings_or_exit(NodeAgentSettings)
    configure_logging("nodeagent", settings.log_level)
    asyncio.run(run(settings))


if __name__ == "__main__":
    main()

"""Wiring of the admission service: the HTTPS webhook server next to the plain health/metrics server, the
Kubernetes client (RuntimeClass and Queue reads) and, when asked, self-registration of the webhooks."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from services.admission import registration
from services.admission.certs import TlsFiles, self_signed
from services.admission.config import AdmissionSettings, WebhookSettings
from services.admission.handlers import MAX_REVIEW_BYTES, Admission, PodEvents, RuntimeClassLookup
from shoal.adapters import kube as k
from shoal.adapters.http import Readiness, build_app
from shoal.logging import get_logger
from shoal.metrics import Metrics

log = get_logger("services.admission")


def tls_files(settings: WebhookSettings) -> TlsFiles:
    if settings.tls_cert_file:
        return TlsFiles(cert=Path(settings.tls_cert_file), key=Path(settings.tls_key_file),
                        ca=Path(settings.tls_ca_file) if settings.tls_ca_file else None)
    directory = Path(settings.cert_dir) if settings.cert_dir else Path(tempfile.mkdtemp(prefix="shoal-admission-"))
    hosts = tuple(dict.fromkeys((settings.url_host, "127.0.0.1", "localhost")))
    return self_signed(directory, hosts)


def build(settings: AdmissionSettings) -> web.Application:
    metrics, readiness = Metrics(), Readiness()
    app = build_app(metrics=metrics, readiness=readiness)
    hook = settings.webhook

    async def wiring(app: web.Application) -> AsyncIterator[None]:
        files = tls_files(hook)
        api = await k.connect_kube(settings.kube, component="admission")
        kube = k.Kube(api, request_timeout_s=min(settings.kube.request_timeout_s, max(hook.timeout_s - 1, 1)))

        async def list_queues() -> list[dict]:
            return (await kube.list(k.QUEUES))[0]

        admission = Admission(metrics=metrics, runtime_class_exists=RuntimeClassLookup(kube),
                              list_queues=list_queues, gpu_sharing=settings.gpu_sharing,
                              gpu_sharing_mode=settings.gpu_sharing_mode, pool_modes=settings.pool_modes(),
                              runtime_class=settings.injected_runtime_class, scheduler_names=settings.scheduler_names,
                              pod_warning=PodEvents(kube) if settings.pod_events else None)
        webhooks = web.Application(client_max_size=MAX_REVIEW_BYTES)
        admission.routes(webhooks)
        runner = web.AppRunner(webhooks, handle_signals=False, access_log=None)
        await runner.setup()
        registered = False
        try:
            host = hook.host or settings.http.host
            site = web.TCPSite(runner, host, hook.port, ssl_context=files.server_context())
            await site.start()
            port = runner.addresses[0][1]
            log.info("webhook_serving", host=host, port=port, gpu_sharing=settings.gpu_sharing,
                     gpu_sharing_mode=settings.gpu_sharing_mode, pool_gpu_sharing_modes=settings.pool_modes(),
                     runtime_class=settings.injected_runtime_class)
            name = registration.instance_name(hook.config_name, settings.topic_prefix)
            if hook.register:
                stale = await registration.remove_stale(kube, keep=name)
                if stale:
                    log.warning("stale_webhooks_removed", configurations=stale)
                mutating, validating = registration.configurations(
                    name, f"https://{hook.url_host}:{port}", files.ca_bundle(),
                    timeout_s=hook.timeout_s, scheduler_names=settings.scheduler_names,
                    namespace_selector=hook.namespace_selector, queue_selector=hook.queue_selector,
                    reservation_namespace=settings.reservation_namespace)
                await registration.register(kube, mutating, validating)
                registered = True
                log.info("webhooks_registered", name=name, port=port)
            readiness.add("webhook", lambda: True)
            yield
        finally:
            if registered and hook.unregister_on_exit:
                try:
                    await registration.unregister(kube, name)
                    log.info("webhooks_unregistered", name=name)
                except Exception as exc:  # shutting down: report, do not mask the original exit
                    log.warning("webhooks_unregister_failed", error=f"{type(exc).__name__}: {exc}")
            await runner.cleanup()
            await api.close()

    app.cleanup_ctx.append(wiring)
    return app

"""Wiring of the admission service: the HTTPS webhook server next to the plain health/metrics server, the
Kubernetes client (RuntimeClass and Queue reads) and, when asked, self-registration of the webhooks."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, ClassVar

from aiohttp import web
from msgspec import Meta

from services.admission import registration
from services.admission.certs import TlsFiles, self_signed
from services.admission.handlers import Admission, PodEvents, RuntimeClassLookup
from shoal.adapters import kube as k
from shoal.adapters.http import Readiness, build_app
from shoal.logging import get_logger
from shoal.metrics import Metrics
from shoal.settings import Port, Section, ServiceSettings

log = get_logger("services.admission")


class WebhookSettings(Section, frozen=True, kw_only=True):
    host: str = ""  # SHOAL_WEBHOOK_HOST; empty: the same as SHOAL_HTTP_HOST (0.0.0.0 in a cluster)
    port: Port = 8443  # SHOAL_WEBHOOK_PORT; 0 picks a free port
    tls_cert_file: str = ""  # SHOAL_WEBHOOK_TLS_CERT_FILE; unset: a self-signed CA + cert in cert_dir
    tls_key_file: str = ""
    tls_ca_file: str = ""  # CA for the caBundle when registering with given files
    cert_dir: str = ""  # where self-signed material goes (default: a temp dir)
    register: bool = False  # SHOAL_WEBHOOK_REGISTER: create the webhook configurations (local stack, tests)
    unregister_on_exit: bool = True
    url_host: str = "127.0.0.1"  # the host the apiserver calls (url: https://<url_host>:<port>/...)
    config_name: str = "shoal-admission"  # + "-<topic prefix>" when SHOAL_TOPIC_PREFIX is set
    namespace_selector: str = ""  # `k=v,...`: only pods in namespaces with these labels
    queue_selector: str = ""  # `k=v,...`: only queues with these labels
    timeout_s: Annotated[int, Meta(ge=1, le=30)] = 5

    def problems(self) -> list[str]:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            return ["SHOAL_WEBHOOK_TLS_CERT_FILE and SHOAL_WEBHOOK_TLS_KEY_FILE: set both or neither"]
        if self.register and self.tls_cert_file and not self.tls_ca_file:
            return ["SHOAL_WEBHOOK_TLS_CA_FILE: required to register the webhooks with given certificate files"]
        return []


class AdmissionSettings(ServiceSettings, frozen=True, kw_only=True):
    env_aliases: ClassVar[dict[str, str]] = {"scheduler_names": "SHOAL_SCHEDULER_NAME"}  # as shoal-config sets

    scheduler_names: tuple[str, ...] = ("shoal-scheduler",)  # SHOAL_SCHEDULER_NAMES (comma-separated)
    gpu_sharing: bool = True  # SHOAL_GPU_SHARING: false rejects every fraction pod (KAI's default)
    runtime_class: str = "nvidia"  # SHOAL_RUNTIME_CLASS: injected into fraction pods if it exists; "none" disables
    pod_events: bool = True  # SHOAL_POD_EVENTS: also a Warning event on a pod whose runtimeClass was skipped
    webhook: WebhookSettings = WebhookSettings()

    @property
    def injected_runtime_class(self) -> str:
        """The RuntimeClass to inject, "" when disabled (an empty variable keeps the default, so `none`)."""
        value = self.runtime_class.strip()
        return "" if value.lower() in ("", "none", '""', "''", "-") else value


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
        api = await k.connect_kube(settings.kube)
        kube = k.Kube(api, request_timeout_s=min(settings.kube.request_timeout_s, max(hook.timeout_s - 1, 1)))

        async def list_queues() -> list[dict]:
            return (await kube.list(k.QUEUES))[0]

        admission = Admission(metrics=metrics, runtime_class_exists=RuntimeClassLookup(kube),
                              list_queues=list_queues, gpu_sharing=settings.gpu_sharing,
                              runtime_class=settings.injected_runtime_class, scheduler_names=settings.scheduler_names,
                              pod_warning=PodEvents(kube) if settings.pod_events else None)
        webhooks = web.Application()
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
                     runtime_class=settings.injected_runtime_class)
            name = registration.instance_name(hook.config_name, settings.topic_prefix)
            if hook.register:
                stale = await registration.remove_stale(kube, keep=name)
                if stale:
                    log.warning("stale_webhooks_removed", configurations=stale)
                mutating, validating = registration.configurations(
                    name, f"https://{hook.url_host}:{port}", files.ca_bundle(),
                    timeout_s=hook.timeout_s, scheduler_names=settings.scheduler_names,
                    namespace_selector=hook.namespace_selector, queue_selector=hook.queue_selector)
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

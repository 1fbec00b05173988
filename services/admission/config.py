"""The admission service's settings (`SHOAL_*` environment variables; `shoal-admission --help` lists them).

Apart from `app.py` so that `--help` imports no client library (the Kubernetes client binds a socket at
import).
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from msgspec import Meta

from shoal.settings import GpuSharingServiceSettings, Port, Section, doc


class WebhookSettings(Section, frozen=True, kw_only=True):
    """The HTTPS webhook server and, when asked, the webhook configurations pointing at it."""

    host: Annotated[str, doc("address the webhooks listen on (empty: SHOAL_HTTP_HOST)")] = ""
    port: Annotated[Port, doc("their HTTPS port (0 picks a free one)")] = 8443
    tls_cert_file: Annotated[str, doc("serving certificate (empty: a self-signed CA and cert in the cert dir)")] = ""
    tls_key_file: Annotated[str, doc("key of the serving certificate")] = ""
    tls_ca_file: Annotated[str, doc("CA of the given certificate, for the caBundle when registering")] = ""
    cert_dir: Annotated[str, doc("where self-signed material goes (empty: a temp dir)")] = ""
    register: Annotated[bool, doc("create the webhook configurations (local stack, tests)")] = False
    unregister_on_exit: Annotated[bool, doc("delete the registered configurations on exit")] = True
    url_host: Annotated[str, doc("host the apiserver calls: https://<url host>:<port>/...")] = "127.0.0.1"
    config_name: Annotated[str, doc("webhook configurations' name (+ -<topic prefix> when one is set)")] = (
        "shoal-admission")
    namespace_selector: Annotated[str, doc("k=v,...: only pods in namespaces with these labels")] = ""
    queue_selector: Annotated[str, doc("k=v,...: only queues with these labels")] = ""
    timeout_s: Annotated[int, Meta(ge=1, le=30), doc("how long the apiserver waits for a review")] = 5

    def problems(self) -> list[str]:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            return ["SHOAL_WEBHOOK_TLS_CERT_FILE and SHOAL_WEBHOOK_TLS_KEY_FILE: set both or neither"]
        if self.register and self.tls_cert_file and not self.tls_ca_file:
            return ["SHOAL_WEBHOOK_TLS_CA_FILE: required to register the webhooks with given certificate files"]
        return []


class AdmissionSettings(GpuSharingServiceSettings, frozen=True, kw_only=True):
    env_aliases: ClassVar[dict[str, str]] = {"scheduler_names": "SHOAL_SCHEDULER_NAME"}  # as shoal-config sets

    scheduler_names: Annotated[tuple[str, ...], doc("pods with one of these schedulerNames are reviewed")] = (
        "shoal-scheduler",)
    gpu_sharing: Annotated[bool, doc("false: Disabled whatever the mode (KAI's legacy global.gpuSharing)")] = True
    runtime_class: Annotated[str, doc("injected into fraction pods if it exists; none disables")] = "nvidia"
    pod_events: Annotated[bool, doc("also a Warning event on a pod whose runtimeClass was skipped")] = True
    webhook: WebhookSettings = WebhookSettings()

    @property
    def injected_runtime_class(self) -> str:
        """The RuntimeClass to inject, "" when disabled (an empty variable keeps the default, so `none`)."""
        value = self.runtime_class.strip()
        return "" if value.lower() in ("", "none", '""', "''", "-") else value

"""connect_kube: the client session looks up proxies from the environment only when one is configured there."""

import asyncio

from shoal.adapters.kube import connect_kube
from shoal.settings import KubeSettings

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def _trusts_env(tmp_path, monkeypatch, env: dict[str, str]) -> bool:
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)

    async def check() -> bool:
        api = await connect_kube(KubeSettings(kubeconfig=str(path)))
        try:
            return api.rest_client.pool_manager.trust_env
        finally:
            await api.close()

    return asyncio.run(check())


def test_no_proxy_in_the_environment_means_no_lookup_per_request(tmp_path, monkeypatch):
    assert _trusts_env(tmp_path, monkeypatch, {}) is False


def test_a_proxy_in_the_environment_is_still_honoured(tmp_path, monkeypatch):
    assert _trusts_env(tmp_path, monkeypatch, {"HTTPS_PROXY": "http://127.0.0.1:3128"}) is True


def test_a_client_made_elsewhere_stops_looking_too(tmp_path, monkeypatch):
    """The dev stack's fake kubelet and the benchmark make their own ApiClient: the same helper applies."""
    from kubernetes_asyncio import client

    from shoal.adapters.kube import skip_proxy_lookup

    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)

    async def check(proxy_env: bool) -> bool:
        if proxy_env:
            monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
        api = client.ApiClient(client.Configuration())
        try:
            assert api.rest_client.pool_manager.trust_env is True  # kubernetes_asyncio's own default
            skip_proxy_lookup(api)
            return api.rest_client.pool_manager.trust_env
        finally:
            await api.close()

    assert asyncio.run(check(False)) is False
    assert asyncio.run(check(True)) is True

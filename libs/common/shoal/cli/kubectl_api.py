"""How `kubectl shoal` reaches Shoal's api service: at a URL (`--api`, $SHOAL_API_URL), or, as kubectl would,
through the apiserver's service proxy to the `shoal-api` Service (`--api-service`, default shoal-system/shoal-api)
with the kubeconfig's credentials. Either way `Unreachable` means "no api service answered": the verbs then read
the cluster directly.

The api service checks the caller's bearer token ($SHOAL_API_TOKEN, else the kubeconfig's: token, tokenFile, exec
plugin). It goes as `Authorization` to a URL and as `X-Shoal-Authorization` through the apiserver's proxy (which
drops `Authorization` once it has authenticated the caller). Client-certificate users have no token to pass on.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from shoal.adapters.kube import bearer_token
from shoal.cli.explain import Unreachable, api_get

CONNECTED: dict = {"connected": True}  # what `Api.stream` yields first: the subscription is live


class Api:
    def __init__(self, kube: Any, *, url: str | None, service: str, timeout_s: float) -> None:
        self.kube, self.url, self.timeout_s = kube, url.rstrip("/") if url else None, timeout_s
        self.service = service
        namespace, _, name = service.partition("/")
        self.proxy = f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/services/{urllib.parse.quote(name)}:http/proxy"

    async def token(self) -> str | None:
        return os.environ.get("SHOAL_API_TOKEN") or await bearer_token(self.kube.api)

    async def _headers(self, name: str) -> dict[str, str]:
        token = await self.token()
        return {name: f"Bearer {token}"} if token else {}

    @property
    def where(self) -> str:
        return self.url or f"service {self.service} (through the apiserver)"

    async def get(self, path: str) -> tuple[int, Any]:
        """GET a JSON answer: (status, body); Unreachable when no api service answers."""
        if self.url is not None:
            return await asyncio.to_thread(api_get, self.url, path, self.timeout_s, await self.token())
        try:
            response = await self.kube.api.call_api(
                self.proxy + path, "GET",
                header_params={"Accept": "application/json", **await self._headers("X-Shoal-Authorization")},
                auth_settings=["BearerToken"], _preload_content=False, _request_timeout=self.timeout_s)
            data = await response.read()
        except Exception as exc:  # noqa: BLE001 - the apiserver itself did not answer: nothing to ask
            raise Unreachable(f"{self.where}: {type(exc).__name__}: {exc}") from None
        try:
            body = json.loads(data or b"null")
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("kind") == "Status" or body is None and response.status >= 400:
            # the apiserver's own answer (no such Service, no endpoints, refused): not the api service's
            message = body.get("message") if isinstance(body, dict) else data[:200].decode(errors="replace")
            raise Unreachable(f"{self.where}: HTTP {response.status}: {message}")
        return response.status, body

    async def stream(self, path: str) -> AsyncIterator[dict]:
        """The decisions of an SSE endpoint, one dict each (CONNECTED first, once subscribed), until it ends."""
        if self.url is not None:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout_s)) \
                    as session:
                try:
                    response = await session.get(self.url + path, headers=await self._headers("Authorization"))
                except (aiohttp.ClientError, OSError) as exc:
                    raise Unreachable(f"{self.url}: {exc}") from None
                async with response:
                    async for event in _sse(response):
                        yield event
            return
        try:
            response = await self.kube.open("GET", self.proxy + path, timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=self.timeout_s), headers=await self._headers("X-Shoal-Authorization"))
        except Exception as exc:  # noqa: BLE001 - mapped errors of the proxy: no api service
            raise Unreachable(f"{self.where}: {exc}") from None
        try:
            async for event in _sse(response):
                yield event
        finally:
            response.release()


async def _sse(response: aiohttp.ClientResponse) -> AsyncIterator[dict]:
    if response.status != 200:
        raise Unreachable(f"{response.url}: HTTP {response.status}")
    data: list[str] = []
    async for raw in response.content:
        line = raw.decode(errors="replace").rstrip("\r\n")
        if line == ": connected":
            yield CONNECTED  # subscribed: nothing after this is missed
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif not line and data:
            try:
                yield json.loads("\n".join(data))
            except ValueError:
                pass
            data = []

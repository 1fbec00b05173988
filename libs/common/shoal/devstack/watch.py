"""List then watch a Kubernetes collection as raw JSON (fast for many objects; no model deserialisation)."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from shoal.core.fields import value_at


class Relist(Exception):
    """The watch cannot continue from its resourceVersion (410 Gone): list again."""


async def list_all(fn: Any, selector: dict[str, str]) -> tuple[list[dict[str, Any]], str]:
    items: list[dict[str, Any]] = []
    cont: str | None = None
    while True:
        resp = await fn(limit=500, _continue=cont, _preload_content=False, **selector)
        data = json.loads(await resp.read())
        items.extend(data.get("items") or [])
        cont = data["metadata"].get("continue")
        if not cont:
            return items, data["metadata"]["resourceVersion"]


async def watch_from(fn: Any, selector: dict[str, str], rv: str, on_event: Any) -> str:
    """Watch from `rv` until the server ends the watch; return the last resourceVersion seen."""
    try:
        resp = await fn(
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=240,
            _request_timeout=270,
            _preload_content=False,
            **selector,
        )
    except ApiException as exc:
        if exc.status == 410:
            raise Relist from None
        raise
    try:
        buf = b""
        async for chunk in resp.content.iter_any():
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Relist
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                rv = value_at(obj, "metadata", "resourceVersion", default=rv)
                if kind != "BOOKMARK":
                    await on_event(kind, obj)
    finally:
        resp.close()
    return rv

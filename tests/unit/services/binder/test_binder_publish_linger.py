"""The binder's publisher holds its messages `SHOAL_PUBLISH_LINGER_MS` (10 ms) so that the results and decisions
of binds landing a few ms apart share produce requests; the other services publish at once (a snapshot
announcement or a plan is waited on)."""

from __future__ import annotations

from typing import Any

import services.binder.app as binder_app
from services.binder.config import BinderSettings
from shoal.adapters import wiring
from shoal.settings import load_settings


def test_the_binder_publishes_with_its_linger_and_the_default_is_none(monkeypatch):
    seen: dict[str, Any] = {}

    class App(dict):
        cleanup_ctx: list = []

    def consumer_app(name, settings, *args, **kwargs):
        seen["name"], seen["linger_ms"] = name, kwargs.get("linger_ms")
        return App()

    monkeypatch.setattr(binder_app, "consumer_app", consumer_app)
    binder_app.build(load_settings(BinderSettings, {}))
    assert seen == {"name": "binder", "linger_ms": 10}
    binder_app.build(load_settings(BinderSettings, {"SHOAL_PUBLISH_LINGER_MS": "0"}))
    assert seen["linger_ms"] == 0
    assert wiring.consumer_app.__kwdefaults__["linger_ms"] == 0
    assert wiring.bus_and_redis.__wrapped__.__kwdefaults__["linger_ms"] == 0

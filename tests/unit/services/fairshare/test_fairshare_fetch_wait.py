"""The fairshare consumer's idle fetch waits `SHOAL_FETCH_WAIT_MS` (500 ms), not the 50 ms the planner's and binder's
consumers need for latency: its figures go out at most once per `min_interval_s`, and a 50 ms idle fetch costs the
broker and the service ~20 requests a second."""

from __future__ import annotations

from typing import Any

import services.fairshare.app as fairshare_app
from services.fairshare.config import FairShareSettings
from shoal.settings import load_settings


def test_the_consumer_waits_longer_than_the_latency_bound_ones_and_keeps_every_other_kafka_setting():
    settings = load_settings(FairShareSettings, {"SHOAL_KAFKA_BOOTSTRAP": "kafka:9092"})
    assert settings.kafka.fetch_max_wait_ms == 50  # the planner's and binder's
    consumer = settings.consumer_kafka()
    assert consumer.fetch_max_wait_ms == 500
    assert consumer.bootstrap == "kafka:9092" and consumer.commit_interval_ms == settings.kafka.commit_interval_ms
    assert load_settings(FairShareSettings, {"SHOAL_FETCH_WAIT_MS": "250"}).consumer_kafka().fetch_max_wait_ms == 250
    # a fetch for all its partitions never waits less than the others do
    assert consumer.idle_fetch_wait_ms == 500
    longer = load_settings(FairShareSettings, {"SHOAL_FETCH_WAIT_MS": "900"}).consumer_kafka()
    assert (longer.fetch_max_wait_ms, longer.idle_fetch_wait_ms) == (900, 900)


def test_the_service_consumes_announcements_with_its_own_fetch_wait(monkeypatch):
    seen: dict[str, Any] = {}

    def consumer_app(name, settings, *args, **kwargs):
        seen["name"], seen["kafka"] = name, settings.kafka
        return object()

    monkeypatch.setattr(fairshare_app, "consumer_app", consumer_app)
    fairshare_app.build(load_settings(FairShareSettings, {"SHOAL_FETCH_WAIT_MS": "700"}))
    assert seen["name"] == "fairshare" and seen["kafka"].fetch_max_wait_ms == 700

"""The Prometheus registry one service process exposes at `/metrics` (prometheus-client underneath).

Usage::

    metrics = Metrics()
    bound = metrics.counter("binds_total", "Pods bound.", ["shard"])
    bound.labels(shard="pool-a").inc()
    cycle = metrics.histogram("cycle_seconds", "Planner cycle time.")
    with cycle.time():
        ...
    body = metrics.render()              # text exposition format, served by shoal.adapters.http

Names get the `shoal_` prefix. Asking twice for the same name returns the same metric, so adapters and
handlers can each declare what they use without coordinating.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

CONTENT_TYPE = CONTENT_TYPE_LATEST

DEFAULT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """A registry of counters, gauges and histograms; one per process (tests make their own)."""

    def __init__(self, namespace: str = "shoal") -> None:
        self.namespace = namespace
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, process_resident_memory_bytes…
        self._made: dict[str, Any] = {}

    def _get(self, kind: type, name: str, doc: str, labels: Sequence[str], **kwargs: Any) -> Any:
        existing = self._made.get(name)
        if existing is not None:
            if not isinstance(existing, kind):
                raise ValueError(f"metric {name!r} already registered as {type(existing).__name__}")
            return existing
        metric = kind(name, doc, labelnames=tuple(labels), namespace=self.namespace, registry=self.registry,
                      **kwargs)
        self._made[name] = metric
        return metric

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        return self._get(Counter, name, doc, labels)

    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        return self._get(Gauge, name, doc, labels)

    def histogram(self, name: str, doc: str, labels: Sequence[str] = (),
                  buckets: Sequence[float] = DEFAULT_BUCKETS) -> Histogram:
        return self._get(Histogram, name, doc, labels, buckets=tuple(buckets))

    def render(self) -> bytes:
        """Every metric in Prometheus text exposition format."""
        return generate_latest(self.registry)

"""GPU usage telemetry: the Prometheus collector with DCGM-like names, and the wire encoding of the
`GpuUsage` message (`shoal.messages.gpu_usage`, topic `shoal.gpu-usage.v1`, keyed by node).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import msgspec
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from shoal.messages.gpu_usage import GpuStat, GpuUsage, MigStat, PodGpuStat

__all__ = ["GpuStat", "GpuUsage", "MigStat", "PodGpuStat", "TelemetryCollector", "decode", "encode"]


class TelemetryCollector(Collector):
    """Exposes the latest `GpuUsage` of each node served, plus kill/report counters, at scrape time.

    Device metrics follow dcgm-exporter: `DCGM_FI_DEV_FB_USED`/`_FB_FREE`/`_FB_TOTAL` (MiB),
    `DCGM_FI_DEV_GPU_UTIL` (%), labels `gpu`, `UUID`, `device`, `modelName`, `Hostname` and `pod`/`namespace` of
    the pod holding the device. Per-pod shares: `DCGM_FI_DEV_FB_USED` is not split by the exporter, so
    they get `shoal_pod_gpu_memory_used_mib` etc. with the same labels.
    """

    def __init__(self) -> None:
        self._latest: dict[str, GpuUsage] = {}
        self._counts: dict[tuple[str, str, str], int] = {}  # (node, kind, reason) → n

    def update(self, usage: GpuUsage) -> None:
        self._latest[usage.node] = usage

    def forget(self, node: str) -> None:
        self._latest.pop(node, None)

    def count(self, node: str, kind: str, reason: str) -> None:
        key = (node, kind, reason)
        self._counts[key] = self._counts.get(key, 0) + 1

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        dev_labels = ["gpu", "UUID", "device", "modelName", "Hostname", "namespace", "pod"]
        used = GaugeMetricFamily("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (MiB).", labels=dev_labels)
        free = GaugeMetricFamily("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (MiB).", labels=dev_labels)
        total = GaugeMetricFamily("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (MiB).", labels=dev_labels)
        util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (%).", labels=dev_labels)
        mig = GaugeMetricFamily("DCGM_FI_DEV_MIG_MODE", "MIG mode enabled (1) or not (0).", labels=dev_labels)
        pod_labels = ["gpu", "UUID", "Hostname", "namespace", "pod"]
        pod_used = GaugeMetricFamily("shoal_pod_gpu_memory_used_mib", "GPU memory a pod uses on a shared GPU.",
                                     labels=pod_labels)
        pod_req = GaugeMetricFamily("shoal_pod_gpu_memory_request_mib", "A pod's guaranteed GPU memory share.",
                                    labels=pod_labels)
        pod_lim = GaugeMetricFamily("shoal_pod_gpu_memory_limit_mib", "A pod's GPU memory limit.", labels=pod_labels)
        pod_over = GaugeMetricFamily("shoal_pod_gpu_memory_over_share_mib",
                                     "GPU memory a pod uses above its limit (0 when within).", labels=pod_labels)
        pod_util = GaugeMetricFamily("shoal_pod_gpu_util", "SM utilization of a pod's processes (%).",
                                     labels=pod_labels)
        for node, usage in sorted(self._latest.items()):
            index_of = {g.uuid: str(g.index) for g in usage.gpus}
            for g in usage.gpus:
                ns, _, name = g.holder.partition("/")
                labels = [str(g.index), g.uuid, f"nvidia{g.index}", g.name, node, ns, name]
                used.add_metric(labels, g.memory_used_mib)
                free.add_metric(labels, max(0, g.memory_total_mib - g.memory_used_mib))
                total.add_metric(labels, g.memory_total_mib)
                mig.add_metric(labels, 1 if g.mig_enabled else 0)
                if g.utilization_percent is not None:
                    util.add_metric(labels, g.utilization_percent)
            for p in usage.pods:
                labels = [index_of.get(p.gpu_uuid, ""), p.gpu_uuid, node, p.namespace, p.pod]
                pod_used.add_metric(labels, p.memory_used_mib)
                pod_req.add_metric(labels, p.memory_request_mib)
                pod_lim.add_metric(labels, p.memory_limit_mib)
                pod_over.add_metric(labels, p.over_share_mib)
                pod_util.add_metric(labels, p.utilization_percent)
        events = CounterMetricFamily("shoal_nodeagent_gpu_memory_actions",
                                     "Over-share reports and process kills by reason.",
                                     labels=["Hostname", "kind", "reason"])
        for (node, kind, reason), n in sorted(self._counts.items()):
            events.add_metric([node, kind, reason], n)
        yield from (used, free, total, util, mig, pod_used, pod_req, pod_lim, pod_over, pod_util, events)


def encode(usage: GpuUsage) -> bytes:
    return msgspec.json.encode(usage)


def decode(data: bytes) -> GpuUsage:
    return msgspec.json.decode(data, type=GpuUsage)


def total_used(stats: Iterable[PodGpuStat]) -> int:
    return sum(p.memory_used_mib for p in stats)

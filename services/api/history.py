"""The dashboard's "over time" chart: GPU allocation per queue and cluster utilisation, in bounded memory.

    history = History(size=360, interval_s=10.0, max_queues=50)      # one hour of 10 s samples
    history.count(decision)                  # every decision from the stream: counted in the open interval
    history.sample(now_s, shards)            # one point from the snapshots (the api's sampler, each interval)
    history.json()                           # {"intervalS": 10, "size": 360, "samples": [...]}, oldest first

A sample is `{"t": epoch s, "capacity": GPUs on ready nodes, "allocated": GPUs held by pods (shared GPUs by
portion), "queues": {queue: GPUs}, "decisions": {kind: count since the previous sample}}`. The samples are a
ring buffer of `size` entries: the oldest is dropped when a new one comes, so memory is at most `size` ×
(`max_queues` + 1 numbers + the decision kinds); a cluster with more queues keeps the largest `max_queues` per
sample and adds the rest up as `(other)`.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
from typing import Any

from services.api.gpumap import DEVICE_MILLI, DONE, fraction_milli, queue_of
from shoal.adapters.shard_snapshots import Current
from shoal.core.model import DEFAULT_RESERVATION_NAMESPACE

OTHER = "(other)"


def allocation(shards: Mapping[str, Current], reservation_namespace: str = DEFAULT_RESERVATION_NAMESPACE,
               ) -> tuple[float, dict[str, float]]:
    """(GPU capacity of ready nodes, GPUs held per queue) over every shard, in GPUs."""
    capacity = 0
    per_queue: Counter[str] = Counter()
    for current in shards.values():
        model = current.model
        capacity += sum(n.gpus for n in model.nodes.values() if n.ready)
        for entry in model.pods.values():
            pod = entry.pod
            node = model.nodes.get(pod.node_name or "")
            if node is None or pod.phase in DONE or pod.namespace == reservation_namespace:
                continue
            milli = fraction_milli(pod, node) * len(pod.gpu_groups) if pod.gpu_groups else pod.gpus * DEVICE_MILLI
            if milli:
                per_queue[queue_of(pod, model) or "(no queue)"] += milli
    return capacity, {q: round(m / DEVICE_MILLI, 3) for q, m in per_queue.items()}


class History:
    def __init__(self, *, size: int = 360, interval_s: float = 10.0, max_queues: int = 50) -> None:
        self.size = size
        self.interval_s = interval_s
        self.max_queues = max_queues
        self._samples: deque[dict[str, Any]] = deque(maxlen=size)
        self._counts: Counter[str] = Counter()

    def count(self, event: Mapping[str, Any]) -> None:
        self._counts[str(event.get("type", "")).rsplit(".", 1)[-1] or "unknown"] += 1

    def add(self, t: float, capacity: float, queues: Mapping[str, float]) -> dict[str, Any]:
        kept = dict(sorted(queues.items(), key=lambda kv: (-kv[1], kv[0]))[:self.max_queues])
        rest = round(sum(queues.values()) - sum(kept.values()), 3)
        if rest > 0:
            kept[OTHER] = rest
        sample = {"t": round(t, 3), "capacity": capacity, "allocated": round(sum(queues.values()), 3),
                  "queues": kept, "decisions": dict(self._counts)}
        self._counts.clear()
        self._samples.append(sample)
        return sample

    def sample(self, t: float, shards: Mapping[str, Current],
               reservation_namespace: str = DEFAULT_RESERVATION_NAMESPACE) -> dict[str, Any]:
        capacity, queues = allocation(shards, reservation_namespace)
        return self.add(t, capacity, queues)

    def __len__(self) -> int:
        return len(self._samples)

    def json(self, since: float | None = None) -> dict[str, Any]:
        samples = [s for s in self._samples if since is None or s["t"] > since]
        return {"intervalS": self.interval_s, "size": self.size, "samples": samples}

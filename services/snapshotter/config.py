"""The snapshotter's settings (`SHOAL_*` environment variables; `shoal-snapshotter --help` lists them).

Apart from `app.py` so that `--help` imports no client library (the Kubernetes client binds a socket at
import).
"""

from __future__ import annotations

from typing import Annotated

from shoal.settings import ServiceSettings, doc


class SnapshotterSettings(ServiceSettings, frozen=True, kw_only=True):
    scheduler_name: Annotated[str, doc("pods with this schedulerName are Shoal's")] = "shoal-scheduler"
    shards: Annotated[tuple[str, ...], doc("shards always published; shards with nodes are found anyway")] = ()
    shard_prefix: Annotated[str, doc("only node pools named with this prefix (several Shoals, one cluster)")] = ""
    debounce_s: Annotated[float, doc("a snapshot is published once watch events pause this long…")] = 0.02
    max_delay_s: Annotated[float, doc("…but no later than this after the first change")] = 0.1
    heartbeat_s: Annotated[float, doc("a shard without changes is announced again after this long")] = 10.0
    inflight_sweep_s: Annotated[float, doc("the whole in-flight hash is read at most this often (else only the "
                                           "entries of pods that changed)")] = 1.0
    base_every: Annotated[int, doc("deltas after which the whole model is stored again")] = 500
    require_podgroup: Annotated[bool, doc("pending pods wait for their PodGroup (the podgrouper makes it)")] = True

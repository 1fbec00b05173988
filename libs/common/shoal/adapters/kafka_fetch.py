"""How long a consumer's fetch may wait at the broker: long when it asks for every partition, short otherwise.

A fetch that finds no new data is held by the broker for the request's wait, and returns as soon as any of
its partitions gets a record. A consumer asking for all of its partitions therefore loses nothing by waiting
long: the next record ends the wait. But while a partition's records are still in the consumer's hands,
aiokafka fetches the other partitions alone, and once those records are handled, the partition's next
records wait for that fetch to end; so such a fetch must be short (`KafkaSettings.fetch_max_wait_ms`).

With one fixed short wait an idle consumer sends a fetch every 50 ms (20 a second per consumer, a few CPU
seconds a minute for the broker and the service, for nothing). `adapt_fetch_wait` gives the fetches that
cover every assigned partition the long wait (`KafkaSettings.idle_fetch_wait_ms`) and leaves the others short.

It reaches into aiokafka's fetcher (the client offers no per-request wait); the version is pinned (uv.lock),
and a fetcher without the expected shape keeps the fixed short wait (a warning says so).
"""

from __future__ import annotations

from typing import Any

from aiokafka.protocol.fetch import FetchRequest

from shoal.logging import get_logger

log = get_logger("shoal.kafka")

WAIT_ATTRIBUTE = "_max_wait_ms"  # FetchRequest's wait, in ms


def _shape_known(fetcher: Any) -> bool:
    try:  # older clients had one FetchRequest class per protocol version, built by the fetcher itself
        probe = FetchRequest(0, 1, 1, 0, [])
    except Exception:  # noqa: BLE001 - any other shape: keep the fixed wait
        return False
    return callable(getattr(fetcher, "_get_actions_per_node", None)) and hasattr(probe, WAIT_ATTRIBUTE)


def asked_partitions(requests: list[tuple[int, Any]]) -> int:
    """How many partitions the fetch requests ask for, all brokers together."""
    return sum(len(partitions) for _, request in requests for _, partitions in request.topics)


def adapt_fetch_wait(consumer: Any, *, idle_ms: int) -> bool:
    """Give `consumer`'s fetches that ask for every assigned partition a wait of `idle_ms` (those that leave
    one out keep the consumer's own `fetch_max_wait_ms`). Call after `consumer.start()`; False (with a warning)
    when the fetcher is not one this knows, which keeps the consumer's own wait for every fetch."""
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None or not _shape_known(fetcher):
        log.warning("kafka_idle_fetch_wait_unavailable", reason="the aiokafka fetcher has another shape; every "
                    "fetch keeps SHOAL_KAFKA_FETCH_MAX_WAIT_MS")
        return False
    actions = fetcher._get_actions_per_node

    def adapted(assignment: Any) -> Any:
        found = actions(assignment)
        requests = found[0]
        if requests and asked_partitions(requests) == len(assignment.tps):
            for _, request in requests:
                setattr(request, WAIT_ATTRIBUTE, idle_ms)
        return found

    fetcher._get_actions_per_node = adapted
    return True

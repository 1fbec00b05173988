"""The local stack's Kafka cluster id never starts with "-": the storage tool reads "-t -x…" as a missing value.

Seen in a clean-clone CI run: "kafka storage format failed: kafka-storage: error: argument --cluster-id/-t:
expected one argument" (one start in 64), and every test that needed the stack errored.
"""

from __future__ import annotations

import base64
import uuid

from shoal.devstack import components


def test_cluster_ids_are_22_url_safe_characters_and_never_start_with_a_dash(monkeypatch):
    dash_first = next(u for u in (uuid.UUID(int=i << 120) for i in range(256))
                      if base64.urlsafe_b64encode(u.bytes).decode().startswith("-"))
    sequence = iter([dash_first, uuid.UUID(int=1)])
    monkeypatch.setattr(components.uuid, "uuid4", lambda: next(sequence))
    found = components._cluster_id()
    assert not found.startswith("-") and len(found) == 22
    assert found == base64.urlsafe_b64encode(uuid.UUID(int=1).bytes).decode().rstrip("=")

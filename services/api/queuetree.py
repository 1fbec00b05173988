"""The dashboard's queue tree: departments → projects, each with its spec and its figures per resource (pure).

    queue_tree(queues, shards)
    # {"pool-a": {"revision": 7, "producedAt": "…", "roots": [{"name": "dept", "children": [{"name": "proj", …}],
    #   "resources": {"gpu": {"deserved": 4, "fairShare": 6, "allocated": 6, "limit": 4, "quota": 4,
    #                         "limitNote": "4 (quota; limit omitted)", "overQuotaWeight": 1.0,
    #                         "borrowed": 2, "allocatedNonPreemptible": 0, "request": 8}, …}}]}}

`queues` are the Queue objects of the snapshots (typed), `shards` the fair-share figures per shard as
`shoal.adapters.explain.all_queues` returns them. `limit` is the effective limit (SPEC §2.1) and `limitNote` says how it
came about, in the words `shoal explain` uses; `borrowed` is what the queue holds beyond its deserved quota
(over-quota use, reclaimable by other queues). A queue known to the fairshare service but not in any snapshot
is shown as a root; a parent that does not exist makes its children roots.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shoal.core.explanation import RESOURCES, display, limit_note
from shoal.core.model import Queue


def spec_of(queue: Queue | None) -> Mapping[str, Any] | None:
    """The queue as the manifest shape `limit_note` reads (None: not in the snapshot)."""
    if queue is None:
        return None
    return {"spec": {"resources": {r: {"limit": getattr(queue, r).limit} for r in RESOURCES}}}


def _resources(queue: Queue | None, figures: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    out = {}
    for r in RESOURCES:
        f = dict((figures or {}).get(r) or {})
        spec = getattr(queue, r) if queue is not None else None
        if spec is not None:
            f["quota"] = display(spec.quota, r)
            f["overQuotaWeight"] = spec.weight
        if "limit" in f:
            f["limitNote"] = limit_note(spec_of(queue), r, f)
        deserved, allocated = f.get("deserved"), f.get("allocated")
        if isinstance(deserved, int | float) and isinstance(allocated, int | float) and deserved != -1:
            f["borrowed"] = round(max(0.0, allocated - deserved), 3)
        out[r] = f
    return out


def _tree(names: Iterable[str], queues: Mapping[str, Queue],
          figures: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    nodes = {}
    for name in sorted(set(names)):
        queue = queues.get(name)
        nodes[name] = {"name": name, "displayName": queue.label if queue else name,
                       "parent": queue.parent if queue else None, "priority": queue.priority if queue else None,
                       "inSnapshot": queue is not None, "resources": _resources(queue, figures.get(name)),
                       "children": []}
    roots = []
    for node in nodes.values():
        parent = nodes.get(node["parent"] or "")
        if parent is not None and parent is not node and not _cycle(nodes, node):
            parent["children"].append(node)
        else:
            roots.append(node)
    return roots


def _cycle(nodes: Mapping[str, dict], node: dict) -> bool:
    seen, cur = set(), node
    while cur is not None:
        if cur["name"] in seen:
            return True
        seen.add(cur["name"])
        cur = nodes.get(cur["parent"] or "")
    return False


def queue_tree(queues: Iterable[Queue], shards: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The tree of every shard with published figures; with none, one entry `""` of the queues alone."""
    by_name = {q.name: q for q in queues}
    out: dict[str, Any] = {}
    for shard in sorted(shards):
        published = shards[shard].get("queues") or {}
        names = set(published) | {p for n in published for p in _ancestors(n, by_name)}
        out[shard] = {"revision": shards[shard].get("revision"), "producedAt": shards[shard].get("producedAt"),
                      "roots": _tree(names, by_name, published)}
    if not out and by_name:
        out[""] = {"revision": None, "producedAt": None, "roots": _tree(by_name, by_name, {})}
    return out


def _ancestors(name: str, queues: Mapping[str, Queue]) -> list[str]:
    out, seen = [], {name}
    cur = queues.get(name)
    while cur is not None and cur.parent in queues and cur.parent not in seen:
        seen.add(cur.parent)
        out.append(cur.parent)
        cur = queues.get(cur.parent)
    return out

"""Watched objects → one typed ShardModel per shard, kept up to date object by object (pure).

Shard = node pool: nodes labelled `kai.scheduler/node-pool=<shard>` (nodes without the label belong to the
`default` shard); PodGroups by the same label; a pending pod of Shoal's scheduler name goes where the PodGroup
it names is (as in KAI, where the PodGroup's node pool decides), by its own label while that does not exist;
a bound pod belongs to its node's shard (pods of other schedulers count there too: they use its resources); queues, priority
classes, topologies and PDBs are cluster-wide and go to every shard. Finished pods (Succeeded, Failed) are
left out. Each change is translated once (`shoal.core.ingest.shard_model.entry_of`) and recorded as the shard's
pending Changes only when the entry differs from the one kept, so a status heartbeat that changes nothing the
core reads is no change. `take(shard)` hands the pending Changes over for the next revision.

    shards = Shards("shoal-scheduler")
    shards.update(pod)            # or shards.remove(pod); a string comes back when the object is left out
    changes = shards.take("pool-a")
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from shoal.core.ingest.common import IngestError
from shoal.core.ingest.grouping import NODE_POOL_LABEL, stable_uid
from shoal.core.ingest.queues import SHIPPED_PRIORITY_CLASSES
from shoal.core.ingest.shard_model import (
    FIELDS,
    KIND_FIELD,
    Changes,
    Entries,
    PodEntry,
    Removed,
    ShardModel,
    entry_of,
    key_of,
)

POOL_LABEL = NODE_POOL_LABEL
DEFAULT_SHARD = "default"
CLUSTER_WIDE = ("queues", "priority_classes", "topologies", "pdbs")
FINISHED = ("Succeeded", "Failed")


def shard_of(obj: Mapping) -> str:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(POOL_LABEL) or DEFAULT_SHARD


def _group_key(entry: PodEntry) -> str:
    return f"{entry.pod.namespace}/{entry.pod.pod_group}"


def object_key(obj: Mapping) -> str:
    """The key the entry of `obj` is kept under (pods by uid, namespaced kinds by ns/name, others by name)."""
    meta = obj.get("metadata") or {}
    kind = obj.get("kind")
    if kind == "Pod":
        return str(meta.get("uid") or stable_uid("Pod", str(meta.get("namespace") or "default"),
                                                 str(meta.get("name") or "")))
    if kind in ("PodGroup", "PodDisruptionBudget"):
        return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
    return str(meta.get("name") or "")


@dataclass
class _Pending:
    upserts: dict[str, dict[str, object]] = field(default_factory=lambda: {f: {} for f in FIELDS})
    removed: dict[str, set[str]] = field(default_factory=lambda: {f: set() for f in FIELDS})

    def put(self, name: str, key: str, item: object) -> None:
        self.removed[name].discard(key)
        self.upserts[name][key] = item

    def drop(self, name: str, key: str) -> None:
        self.upserts[name].pop(key, None)
        self.removed[name].add(key)

    def changes(self) -> Changes:
        return Changes(upserts=Entries(**{f: tuple(self.upserts[f].values()) for f in FIELDS}),
                       removed=Removed(**{f: tuple(sorted(self.removed[f])) for f in FIELDS}))


class Shards:
    def __init__(self, scheduler_name: str, *, shard_prefix: str = "", fixed: Iterable[str] = (),
                 raw_pods: Callable[[], Iterable[Mapping]] = tuple, now: Callable[[], str] = lambda: "") -> None:
        self.scheduler_name = scheduler_name
        self.shard_prefix = shard_prefix
        self.fixed = frozenset(fixed)
        self.models: dict[str, ShardModel] = {}
        self._pending: dict[str, _Pending] = {}
        self._raw_pods = raw_pods  # every watched pod manifest: re-translated when priority class names change
        self._now = now
        self._cluster = ShardModel()  # the cluster-wide entries every shard gets
        self._node_shard: dict[str, str] = {}  # node name → its shard
        self._nodes_in: dict[str, int] = {}  # shard → how many nodes it has
        self._pods: dict[str, PodEntry] = {}  # uid → entry, every pod not finished
        self._pod_home: dict[str, str] = {}  # uid → the shard it is kept in
        self._on_node: dict[str, set[str]] = {}  # node name → uids of the pods bound there
        self._group_home: dict[str, str] = {}  # ns/name → shard, accepted shards only
        self._group_shard: dict[str, str] = {}  # ns/name → the pool label of every PodGroup
        self._naming: dict[str, set[str]] = {}  # ns/name of a PodGroup → uids of the pods that name it
        self._class_names = self._names()
        self.pending_pods: dict[str, int] = {}  # shard → pods without a node, kept as entries change

    # ---- what the publisher reads -------------------------------------------------------------------------
    def active(self) -> list[str]:
        """Shards to publish: the fixed ones and every accepted shard with at least one node."""
        return sorted(self.fixed | {s for s, n in self._nodes_in.items() if n > 0 and self._accept(s)})

    def changed(self) -> list[str]:
        """Shards with changes not taken yet."""
        return sorted(self._pending)

    def take(self, shard: str) -> Changes:
        pending = self._pending.pop(shard, None)
        return pending.changes() if pending is not None else Changes()

    def model(self, shard: str) -> ShardModel:
        if shard not in self.models:
            self.models[shard] = ShardModel()
            for name in CLUSTER_WIDE:
                for key, item in getattr(self._cluster, name).items():
                    self._put(shard, name, key, item)
        return self.models[shard]

    # ---- watch events ---------------------------------------------------------------------------------------
    def update(self, obj: Mapping) -> str | None:
        """Take in a created or changed object; the problem text when it is broken (its entry is removed)."""
        kind = obj.get("kind")
        if kind not in KIND_FIELD:
            return None
        if kind == "Pod" and (obj.get("status") or {}).get("phase") in FINISHED:
            self.remove(obj)
            return None
        try:
            item = entry_of(obj, now=self._now(), class_names=self._class_names)
        except IngestError as exc:
            self.remove(obj)
            return f"{exc.field}: {exc.message}"
        if kind == "Pod":
            self._pod(item)  # type: ignore[arg-type]
        elif kind == "Node":
            self._node(key_of(item), shard_of(obj), item)
        elif kind == "PodGroup":
            self._group(key_of(item), shard_of(obj), item)
        else:
            self._cluster_wide(KIND_FIELD[kind], key_of(item), item)
        return None

    def remove(self, obj: Mapping) -> None:
        kind = obj.get("kind")
        if kind not in KIND_FIELD:
            return
        key = object_key(obj)
        if kind == "Pod":
            self._pod_gone(key)
        elif kind == "Node":
            self._node(key, None, None)
        elif kind == "PodGroup":
            self._group(key, None, None)
        else:
            self._cluster_wide(KIND_FIELD[kind], key, None)

    # ---- per kind -------------------------------------------------------------------------------------------
    def _pod(self, entry: PodEntry) -> None:
        uid = entry.pod.uid
        old = self._pods.get(uid)
        if old is not None and old.pod.node_name != entry.pod.node_name:
            self._unbind(uid, old.pod.node_name)
        if old is not None and old.named and (not entry.named or _group_key(old) != _group_key(entry)):
            self._unname(uid, old)  # a pod that names another PodGroup now is no longer one of the old one's
        self._pods[uid] = entry
        if entry.pod.node_name:
            self._on_node.setdefault(entry.pod.node_name, set()).add(uid)
        if entry.named:
            self._naming.setdefault(_group_key(entry), set()).add(uid)
        self._rehome(uid)

    def _pod_gone(self, uid: str) -> None:
        old = self._pods.pop(uid, None)
        if old is not None:
            self._unbind(uid, old.pod.node_name)
            self._unname(uid, old)
        home = self._pod_home.pop(uid, None)
        if home is not None:
            self._drop(home, "pods", uid)

    def _unbind(self, uid: str, node: str | None) -> None:
        if node and node in self._on_node:
            self._on_node[node].discard(uid)
            if not self._on_node[node]:
                del self._on_node[node]

    def _unname(self, uid: str, entry: PodEntry) -> None:
        key = _group_key(entry)
        if key in self._naming:
            self._naming[key].discard(uid)
            if not self._naming[key]:
                del self._naming[key]

    def _rehome(self, uid: str) -> None:
        entry = self._pods[uid]
        pod = entry.pod
        if pod.node_name:
            home = self._node_shard.get(pod.node_name)
        elif entry.scheduler == self.scheduler_name:
            home = (self._group_shard.get(_group_key(entry)) if entry.named else None) \
                or pod.labels.get(POOL_LABEL) or DEFAULT_SHARD
        else:
            home = None
        if home is not None and not self._accept(home):
            home = None
        old = self._pod_home.get(uid)
        if old is not None and old != home:
            self._drop(old, "pods", uid)
        if home is None:
            self._pod_home.pop(uid, None)
            return
        self._pod_home[uid] = home
        self._put(home, "pods", uid, entry)

    def _node(self, name: str, shard: str | None, item: object) -> None:
        old = self._node_shard.get(name)
        if old is not None and old != shard:
            self._drop(old, "nodes", name)
            self._nodes_in[old] -= 1
            del self._node_shard[name]
        if shard is not None and self._accept(shard):
            if old != shard:
                self._node_shard[name] = shard
                self._nodes_in[shard] = self._nodes_in.get(shard, 0) + 1
            self._put(shard, "nodes", name, item)
        if old != shard:
            for uid in sorted(self._on_node.get(name, ())):
                self._rehome(uid)

    def _group(self, key: str, shard: str | None, item: object) -> None:
        old = self._group_home.pop(key, None)
        if old is not None and old != shard:
            self._drop(old, "pod_groups", key)
        if shard is not None and self._accept(shard):
            self._group_home[key] = shard
            self._put(shard, "pod_groups", key, item)
        moved = self._group_shard.get(key) != shard
        if shard is None:
            self._group_shard.pop(key, None)
        else:
            self._group_shard[key] = shard
        if moved:
            for uid in sorted(self._naming.get(key, ())):
                self._rehome(uid)

    def _cluster_wide(self, name: str, key: str, item: object) -> None:
        store: dict = getattr(self._cluster, name)
        if item is None:
            store.pop(key, None)
        else:
            store[key] = item
        for shard in list(self.models):
            if item is None:
                self._drop(shard, name, key)
            else:
                self._put(shard, name, key, item)
        if name == "priority_classes" and self._names() != self._class_names:
            self._class_names = self._names()
            for raw in self._raw_pods():  # the podgrouper's defaults read the class names
                self.update(raw)

    # ---- model + pending changes ----------------------------------------------------------------------------
    def _accept(self, shard: str) -> bool:
        return shard in self.fixed or shard.startswith(self.shard_prefix)

    def _put(self, shard: str, name: str, key: str, item: object) -> None:
        model = self.model(shard)
        old = getattr(model, name).get(key)
        if old == item:
            return
        if name == "pods":
            self._count(shard, old, -1)
            self._count(shard, item, 1)
        model.put(name, key, item)
        self._pending.setdefault(shard, _Pending()).put(name, key, item)

    def _drop(self, shard: str, name: str, key: str) -> None:
        old = self.model(shard).drop(name, key)
        if old is not None:
            if name == "pods":
                self._count(shard, old, -1)
            self._pending.setdefault(shard, _Pending()).drop(name, key)

    def _count(self, shard: str, entry: object, sign: int) -> None:
        if isinstance(entry, PodEntry) and not entry.pod.node_name:
            self.pending_pods[shard] = self.pending_pods.get(shard, 0) + sign

    def _names(self) -> tuple[str, ...]:
        return tuple(sorted({pc.name for pc in SHIPPED_PRIORITY_CLASSES} | set(self._cluster.priority_classes)))

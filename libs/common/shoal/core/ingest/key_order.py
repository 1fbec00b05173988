"""A store's keys kept in snapshot order between cycles, so a cycle re-sorts only what changed.

The core's Snapshot holds pods sorted by (namespace, name, uid) and PodGroups by (namespace, name). A shard's
model changes by a few objects per revision while it holds 140k of them: sorting every collection again each
cycle cost more than the rest of the assembly. `KeyOrder` keeps the sorted (sort key, store key) pairs; the
caller says which keys changed (`touch`), and `keys` re-places only those (bisect), sorting afresh when too
much changed or when the store no longer matches what was kept. Sort keys are tuples of strings, so any
names order exactly as a full sort would.

    order = KeyOrder(lambda entry: (entry.pod.namespace, entry.pod.name, entry.pod.uid))
    order.touch("uid-1")             # after the store's "uid-1" was set, replaced or removed
    keys = order.keys(store)         # the store's keys, its values in sort order
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Hashable, Mapping

REBUILD_FRACTION = 8  # more changed keys than 1/8 of the store: one full sort is cheaper


class KeyOrder:
    def __init__(self, sort_key: Callable[[object], tuple]) -> None:
        self._sort_key = sort_key
        self._sorts: list[tuple] | None = None  # sorted (sort key, store key) pairs
        self._keys: list[Hashable] = []  # the store keys of _sorts, in the same order
        self._placed: dict[Hashable, tuple] = {}  # store key → its (sort key, store key) pair
        self._touched: set[Hashable] = set()

    def touch(self, key: Hashable) -> None:
        """The store's item under `key` was set, replaced or removed."""
        if self._sorts is not None:
            self._touched.add(key)

    def keys(self, store: Mapping) -> list:
        """The store's keys, ordered by their items' sort keys (a new list)."""
        sorts = self._sorts
        if sorts is None or len(self._touched) * REBUILD_FRACTION > len(store):
            return self._rebuild(store)
        placed, sort_key, keys = self._placed, self._sort_key, self._keys
        for key in self._touched:
            old = placed.pop(key, None)
            if old is not None:
                at = bisect_left(sorts, old)
                del sorts[at], keys[at]
            item = store.get(key)
            if item is not None:
                pair = placed[key] = (sort_key(item), key)
                at = bisect_left(sorts, pair)
                sorts.insert(at, pair)
                keys.insert(at, key)
        self._touched.clear()
        if len(keys) != len(store):  # the store changed without a touch: trust nothing kept
            return self._rebuild(store)
        return list(keys)

    def _rebuild(self, store: Mapping) -> list:
        sort_key = self._sort_key
        self._placed = {key: (sort_key(item), key) for key, item in store.items()}
        self._sorts = sorted(self._placed.values())
        self._keys = [key for _, key in self._sorts]
        self._touched.clear()
        return list(self._keys)

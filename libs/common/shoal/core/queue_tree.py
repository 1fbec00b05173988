"""Queue-tree sanity: orphans, cycles, duplicates, children and leaves (pure, never raises).

KAI's `cleanQueueOrphans` deletes a queue whose parent does not exist together with all its descendants.
Shoal does the same and also drops queues caught in a parent cycle (a -> b -> a, or a queue that is its
own parent) with their descendants, so bad input can never hang or crash the core. Dropped queues are
returned with a reason so the caller can report them (condition/event) and keep scheduling the rest.

A parent of `None` or `""` means a top-level queue. Everything returned is sorted by name, so the result
does not depend on the input order. When a name appears twice, the first occurrence in the input wins
and the later ones are dropped as `DuplicateQueue`; callers should pass queues in a deterministic order
(sorted by name, as the snapshot does) if they can contain duplicates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

MISSING_PARENT = "MissingParent"
PARENT_CYCLE = "ParentCycle"
DUPLICATE_QUEUE = "DuplicateQueue"


class DroppedQueue(NamedTuple):
    name: str
    reason: str  # MISSING_PARENT | PARENT_CYCLE | DUPLICATE_QUEUE
    message: str


class QueueTree(NamedTuple):
    """A sane queue forest: every parent exists, no cycles."""

    parents: dict[str, str | None]  # name -> parent (None for top level), sorted by name
    children: dict[str, tuple[str, ...]]  # name -> children sorted by name (every kept queue is a key)
    dropped: tuple[DroppedQueue, ...]  # sorted by name

    def top_level(self) -> tuple[str, ...]:
        return tuple(name for name, parent in self.parents.items() if parent is None)

    def is_leaf(self, name: str) -> bool:
        return name in self.parents and not self.children[name]

    def leaves(self) -> tuple[str, ...]:
        return tuple(name for name, kids in self.children.items() if not kids)

    def ancestors(self, name: str) -> tuple[str, ...]:
        """The parent chain from the queue's parent up to its top-level queue."""
        chain: list[str] = []
        parent = self.parents.get(name)
        while parent is not None:
            chain.append(parent)
            parent = self.parents[parent]
        return tuple(chain)

    def path(self, name: str) -> tuple[str, ...]:
        """The queue itself, then its ancestors (the order capacity checks walk)."""
        return (name, *self.ancestors(name)) if name in self.parents else ()

    def top_down(self) -> tuple[str, ...]:
        """Every queue, parents before children; siblings by name (breadth first)."""
        order: list[str] = list(self.top_level())
        i = 0
        while i < len(order):
            order.extend(self.children[order[i]])
            i += 1
        return tuple(order)


def build_tree(edges: Iterable[tuple[str, str | None]]) -> QueueTree:
    """Sanitise (name, parent) pairs into a QueueTree, dropping orphans, cycles and duplicates."""
    raw: dict[str, str | None] = {}
    dropped: dict[str, DroppedQueue] = {}
    for name, parent in edges:
        if name in raw:
            dropped.setdefault(
                name, DroppedQueue(name, DUPLICATE_QUEUE, f"Queue '{name}' is defined more than once")
            )
            continue
        raw[name] = parent or None

    # state: None = unknown; "" = reaches a root; otherwise the DroppedQueue of the first bad ancestor
    verdict: dict[str, DroppedQueue | None] = {}
    for start in sorted(raw):
        if start in verdict:
            continue
        chain: list[str] = []
        on_chain: set[str] = set()
        node: str | None = start
        cause: DroppedQueue | None = None
        while True:
            if node is None:
                break
            if node in verdict:
                cause = verdict[node]
                break
            if node not in raw:  # the previous queue's parent does not exist
                child = chain[-1]
                cause = DroppedQueue(child, MISSING_PARENT, f"Queue '{child}' has missing parent '{node}'")
                break
            if node in on_chain:
                cycle = chain[chain.index(node) :]
                names = " -> ".join([*cycle, node])
                cause = DroppedQueue(node, PARENT_CYCLE, f"Queue parent cycle: {names}")
                for member in cycle:
                    verdict[member] = DroppedQueue(member, PARENT_CYCLE, f"Queue parent cycle: {names}")
                break
            chain.append(node)
            on_chain.add(node)
            node = raw[node]
        for member in chain:
            if member in verdict:
                continue
            if cause is None:
                verdict[member] = None
            elif member == cause.name:
                verdict[member] = cause
            else:
                verdict[member] = DroppedQueue(
                    member, cause.reason, f"Ancestor of queue '{member}' was dropped: {cause.message}"
                )

    parents: dict[str, str | None] = {}
    for name in sorted(raw):
        bad = verdict[name]
        if bad is None:
            parents[name] = raw[name]
        else:
            dropped.setdefault(name, bad)
    children: dict[str, list[str]] = {name: [] for name in parents}
    for name, parent in parents.items():
        if parent is not None:
            children[parent].append(name)
    return QueueTree(
        parents=parents,
        children={name: tuple(kids) for name, kids in children.items()},
        dropped=tuple(dropped[name] for name in sorted(dropped)),
    )


def tree_from_parents(parents: Mapping[str, str | None]) -> QueueTree:
    """build_tree over a name -> parent mapping (visited in name order)."""
    return build_tree((name, parents[name]) for name in sorted(parents))

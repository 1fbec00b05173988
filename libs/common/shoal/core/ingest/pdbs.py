"""PodDisruptionBudgets → the pods an eviction may not take now (Shoal's improvement, SPEC §2.2).

KAI deletes victims directly and ignores PDBs; Shoal evicts through the Eviction API, which refuses an
eviction that a PDB does not allow. So that the planner does not pick such a victim over and over, a
running pod selected by a PDB of its namespace whose `status.disruptionsAllowed` is 0 (or not computed
yet — the API refuses then too) is marked `eviction_blocked` and the eviction actions leave it alone.
Selectors follow Kubernetes: `matchLabels` and `matchExpressions` (In, NotIn, Exists, DoesNotExist) all
hold; an empty selector selects every pod of the namespace, a missing one selects none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def _matches(selector: Mapping, labels: Mapping[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, Mapping):
            return False
        key, op, values = expr.get("key"), expr.get("operator"), list(expr.get("values") or [])
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def _exhausted(pdb: Mapping) -> bool:
    status = pdb.get("status") if isinstance(pdb.get("status"), Mapping) else {}
    allowed = status.get("disruptionsAllowed")
    return not isinstance(allowed, int) or allowed <= 0


def blocked_pod_keys(pdbs: Iterable[Mapping], pods: Iterable[tuple[str, str, Mapping[str, str]]]) -> set[str]:
    """Keys ("ns/name") of the pods whose eviction a PDB forbids now; `pods` yields (key, namespace, labels)."""
    by_namespace: dict[str, list[Mapping]] = {}
    for pdb in pdbs:
        meta = pdb.get("metadata") if isinstance(pdb.get("metadata"), Mapping) else {}
        spec = pdb.get("spec") if isinstance(pdb.get("spec"), Mapping) else {}
        selector = spec.get("selector")
        if not isinstance(selector, Mapping) or not _exhausted(pdb):
            continue
        by_namespace.setdefault(str(meta.get("namespace") or "default"), []).append(selector)
    if not by_namespace:
        return set()
    return {key for key, namespace, labels in pods
            if any(_matches(sel, labels) for sel in by_namespace.get(namespace, ()))}

"""PodGroup UPDATE validation: a running semi-preemptible PodGroup's minimum may shrink, never grow (KAI v0.18).

Raising `minMember` or `minSubGroup` would turn running surplus pods (preemptible, possibly over quota) into
core pods (non-preemptible, in quota) without a scheduling decision. Values are compared as the scheduler
applies them: an unset root `minMember` is 1, an unset `minSubGroup` is every direct child, an unset
subgroup `minMember` is 0; subgroups are matched by name (new subgroups are not compared). The root is
checked first (minMember, then minSubGroup), then the subgroups in the updated spec's order; the first
increase found is the denial, in KAI's words.

Running: the old PodGroup has been started (annotation `kai.scheduler/last-start-timestamp`) or has core
pods in `status.schedulingState.corePods`. KAI refuses the increase on any semi-preemptible PodGroup; Shoal
lets a group that has never run change its minimum (nothing would be reclassified).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

SEMI_PREEMPTIBLE = "semi-preemptible"
LAST_START = "kai.scheduler/last-start-timestamp"


def _map(value: object) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _subgroups(spec: Mapping) -> list[Mapping]:
    raw = spec.get("subGroups")
    return [s for s in raw if isinstance(s, Mapping) and s.get("name")] if isinstance(raw, list) else []


def _int(value: object, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value


def _children(subgroups: list[Mapping]) -> Counter:
    """Direct children per parent name ("" = the PodGroup's root)."""
    return Counter(str(s.get("parent") or "") for s in subgroups)


def is_running(podgroup: Mapping) -> bool:
    meta, status = _map(podgroup.get("metadata")), _map(podgroup.get("status"))
    if _map(meta.get("annotations")).get(LAST_START):
        return True
    return bool(_map(status.get("schedulingState")).get("corePods"))


def _checks(old: Mapping, new: Mapping) -> list[tuple[str, str, int, int]]:
    """(field, where, old value, new value) in checking order."""
    old_sgs, new_sgs = _subgroups(old), _subgroups(new)
    old_children, new_children = _children(old_sgs), _children(new_sgs)
    where = "a semi-preemptible PodGroup"
    out = [("minMember", where, _int(old.get("minMember"), 1), _int(new.get("minMember"), 1)),
           ("minSubGroup", where, _int(old.get("minSubGroup"), old_children[""]),
            _int(new.get("minSubGroup"), new_children[""]))]
    by_name = {str(s["name"]): s for s in old_sgs}
    for sg in new_sgs:
        name = str(sg["name"])
        before = by_name.get(name)
        if before is None:
            continue
        where = f'subgroup "{name}" of a semi-preemptible PodGroup'
        out.append(("minMember", where, _int(before.get("minMember"), 0), _int(sg.get("minMember"), 0)))
        out.append(("minSubGroup", where, _int(before.get("minSubGroup"), old_children[name]),
                    _int(sg.get("minSubGroup"), new_children[name])))
    return out


def validate_update(old: Mapping, new: Mapping) -> str | None:
    """The denial message for an update of `old` to `new`, or None when it is allowed."""
    old_spec = _map(old.get("spec"))
    if old_spec.get("preemptibility") != SEMI_PREEMPTIBLE or not is_running(old):
        return None
    for field, where, before, after in _checks(old_spec, _map(new.get("spec"))):
        if after > before:
            return (f"cannot increase {field} ({before} -> {after}) on {where}: it would reclassify running "
                    f"elastic pods or subgroups as core")
    return None

"""Reading fields of API objects, as the apiserver sends them (plain dicts from JSON).

Any field may be absent, `null` (a CRD's `status.conditions` right after creation, `metadata.annotations` on a
pod nobody annotated) or of another type than expected (hand-written manifests): `obj.get("status", {})`
returns None for `"status": null`, and the next `.get` raises in a watch loop. These never raise:

    value_at(pod, "spec", "nodeName")              # the value, or None (or `default`)
    mapping(pod, "metadata", "annotations")        # a Mapping, {} unless the field is one
    items(crd, "status", "conditions")             # a list, [] unless the field is one
    text(pod, "metadata", "uid")                   # a str, "" unless the field is one
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def value_at(obj: object, *path: str, default: Any = None) -> Any:
    """The value at `path`, or `default` where a step is missing, null or not a mapping."""
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping):
            return default
        value = value.get(key)
        if value is None:
            return default
    return value


def mapping(obj: object, *path: str) -> Mapping[str, Any]:
    value = value_at(obj, *path)
    return value if isinstance(value, Mapping) else {}


def items(obj: object, *path: str) -> list[Any]:
    value = value_at(obj, *path)
    return value if isinstance(value, list) else []


def text(obj: object, *path: str) -> str:
    value = value_at(obj, *path)
    return value if isinstance(value, str) else ""

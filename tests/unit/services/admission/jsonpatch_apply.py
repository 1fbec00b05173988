"""Apply the JSON Patch operations admission returns (RFC 6902 `add` and `replace`, as the API server would),
so tests assert on the pod the kubelet gets rather than on the operations."""

from __future__ import annotations

import copy


def _steps(path: str) -> list[str]:
    return [part.replace("~1", "/").replace("~0", "~") for part in path.split("/")[1:]]


def apply(document: dict, ops: list[dict]) -> dict:
    out = copy.deepcopy(document)
    for op in ops:
        if op["op"] not in ("add", "replace"):
            raise ValueError(f"unsupported op {op['op']!r}")
        *parents, last = _steps(op["path"])
        target = out
        for step in parents:
            target = target[int(step)] if isinstance(target, list) else target[step]
        if isinstance(target, list):
            if last == "-":
                target.append(op["value"])
            elif op["op"] == "add":
                target.insert(int(last), op["value"])
            else:
                target[int(last)] = op["value"]
        else:
            if op["op"] == "replace" and last not in target:
                raise KeyError(f"replace of a missing member: {op['path']}")
            target[last] = op["value"]
    return out

"""Keep the stack's image storage from growing with every rebuild: buildah's layer cache holds one chain of
intermediate images per build, and each change to Shoal's sources adds a new one per service.

After a build, the images its log names (steps reused from the cache or committed) are recorded per service
and target; `prune` then removes every image that is neither tagged, nor recorded for the latest build of some
service and target, nor made in the last hour, nor an ancestor of one of those. So the next rebuild still
finds its dependency layers, a stale chain goes with the build that replaced it, and another client building
on the same storage (Tilt through podman's service) does not lose the stages of a build it is running.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from shoal.devstack.containers import engine_dir, run_engine

RECENT_S = 3600  # images younger than this are never removed
_ID = re.compile(r"^--> (?:Using cache )?([0-9a-f]{11,64})$", re.MULTILINE)


def _record_file() -> Path:
    return engine_dir() / "build-cache.json"


def ids_in_log(text: str) -> set[str]:
    """Image ids (full or the short form buildah prints) of the steps a `buildah bud` log reports."""
    return set(_ID.findall(text))


def record(service: str, target: str, ids: Iterable[str]) -> None:
    """Remember the images the latest build of `service`/`target` used (replacing the previous build's)."""
    path = _record_file()
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        recorded = {}
    recorded[f"{service}/{target}"] = sorted(ids)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(recorded, indent=1) + "\n")
    tmp.replace(path)


def prune(say: Callable[[str], None]) -> int:
    """Remove the images nothing keeps (see the module doc); how many were removed."""
    rows = json.loads(
        run_engine(["podman", "images", "--all", "--format", "json"], "list images").stdout or "[]"
    )
    parent = {row["Id"]: row.get("ParentId") or "" for row in rows}
    try:
        kept_short = {i for ids in json.loads(_record_file().read_text()).values() for i in ids}
    except (OSError, ValueError):
        return 0  # nothing recorded yet: nothing is known to be stale
    recent = time.time() - RECENT_S
    live: set[str] = set()
    for row in rows:
        image_id = row["Id"]
        keep = row.get("Names") or int(row.get("Created") or 0) > recent
        if keep or any(image_id.startswith(short) for short in kept_short):
            while image_id and image_id not in live:
                live.add(image_id)
                image_id = parent.get(image_id, "")
    dead = [i for i in parent if i not in live]
    if not dead:
        return 0
    # children before their parents, so each removal is of an image nothing depends on any more
    depth = {i: _depth(i, parent) for i in dead}
    dead.sort(key=lambda i: -depth[i])
    proc = run_engine(["podman", "rmi", *dead], "remove stale build-cache images", timeout_s=600, check=False)
    removed = (
        len(dead) if proc.returncode == 0 else len([ln for ln in proc.stdout.splitlines() if ln.strip()])
    )
    say(f"devstack: removed {removed} stale build-cache image(s)")
    return removed


def _depth(image_id: str, parent: dict[str, str]) -> int:
    depth = 0
    while (image_id := parent.get(image_id, "")) and depth < 1000:
        depth += 1
    return depth

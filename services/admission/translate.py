"""Pure admission rules: pod fraction validation (KAI's exact messages, reference §5.1 / S31), pod mutation
(the GPU container's env from the pod's GPU ConfigMaps, as KAI's; `runtimeClassName` for fraction pods, only
when that RuntimeClass exists: SPEC §2.8) and queue sanity
(SPEC §2.1, reference §2.1). No I/O: the handlers pass in what they read from the cluster.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from services.admission import sharing
from shoal.core.ingest import container_gpu
from shoal.core.kai_labels import FRACTION, GPU_MEMORY, NUM_DEVICES
from shoal.core.sharing_mode import DEFAULT_MODE, DISABLED, disabled_message

CONTAINER_NAME = "gpu-fraction-container-name"
MPS = "mps"
WHOLE_GPU = "nvidia.com/gpu"
RESOURCES = ("gpu", "cpu", "memory")
UNLIMITED = -1.0

FRACTION_RANGE = "gpu-fraction annotation value must be a positive number smaller than 1.0"
MEMORY_POSITIVE = "gpu-memory annotation value must be a positive integer greater than 0"
FRACTION_AND_WHOLE = "cannot have both GPU fraction request and whole GPU resource request/limit"
FRACTION_AND_MEMORY = "cannot request both GPU and GPU memory"
DEVICES_WITHOUT_PORTION = "cannot request multiple fractional devices without specifying fraction portion or gpu-memory"
DEVICES_POSITIVE = "gpu-fraction-num-devices annotation value must be a positive integer"
MPS_WITHOUT_FRACTION = "mps annotation is only valid together with a gpu-fraction or gpu-memory request"

_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|m|)$")
_POSITIVE_INT = re.compile(r"[0-9]{1,18}")  # ASCII digits, as Go's strconv reads them; no 5,000-digit ints


def _map(value: object) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def shown(value: object, limit: int = 80) -> str:
    """`value` as a denial quotes it: its repr, cut to `limit` characters (a hostile value may be megabytes)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def parse_fraction(raw: object) -> float | None:
    """A Kubernetes-quantity portion 0 < f < 1, or None when the value is not one."""
    text = str(raw).strip()
    match = _QUANTITY.match(text)
    if not match:
        return None
    try:
        value = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0 < value < 1 else None


def parse_positive_int(raw: object) -> int | None:
    text = str(raw).strip()
    if not _POSITIVE_INT.fullmatch(text):  # str.isdigit() also takes "²", which int() refuses
        return None
    value = int(text)
    return value if value > 0 else None


def _annotations(pod: Mapping) -> dict[str, str]:
    return {str(k): str(v) for k, v in _map(_map(pod.get("metadata")).get("annotations")).items()}


def _containers(pod: Mapping) -> list[Mapping]:
    spec = _map(pod.get("spec"))
    return [c for c in [*_list(spec.get("initContainers")), *_list(spec.get("containers"))] if isinstance(c, Mapping)]


def _requests_whole_gpu(pod: Mapping) -> bool:
    for container in _containers(pod):
        resources = _map(container.get("resources"))
        for section in ("requests", "limits"):
            if WHOLE_GPU in _map(resources.get(section)):
                return True
    return False


def is_sharing_request(pod: Mapping) -> bool:
    """The pod asks for a shared GPU (a fraction annotation of any kind, per-container memory included)."""
    annotations = _annotations(pod)
    return any(key in annotations for key in (FRACTION, GPU_MEMORY, NUM_DEVICES)) or (
        container_gpu.has_memory_annotations(annotations))


def pod_display_name(pod: Mapping, request_namespace: str = "", request_name: str = "") -> str:
    meta = _map(pod.get("metadata"))
    namespace = str(meta.get("namespace") or request_namespace or "default")
    name = str(meta.get("name") or request_name or meta.get("generateName") or "")
    return f"{namespace}/{name}"


def validate_pod(pod: Mapping, *, gpu_sharing: bool = True, display_name: str = "",
                 mode: str = DEFAULT_MODE) -> str | None:
    """The denial message for a pod's GPU-sharing request, or None when it is valid (or asks for none).
    `mode`: the pod's GPU sharing mode (`sharing.pod_mode`); `gpu_sharing=False` is the legacy Disabled."""
    owned = sharing.binder_owned_problem(pod)
    if owned:
        return owned
    if not is_sharing_request(pod):
        annotations = _annotations(pod)
        if annotations.get(MPS, "").lower() == "true":
            return MPS_WITHOUT_FRACTION
        return sharing.container_problem(pod)  # a compute mode alone: its value is still checked
    if not gpu_sharing or mode == DISABLED:
        return disabled_message(display_name or pod_display_name(pod))
    annotations = _annotations(pod)
    has_fraction, has_memory = FRACTION in annotations, GPU_MEMORY in annotations
    if has_fraction and parse_fraction(annotations[FRACTION]) is None:
        return FRACTION_RANGE
    if has_memory and parse_positive_int(annotations[GPU_MEMORY]) is None:
        return MEMORY_POSITIVE
    if has_fraction and has_memory:
        return FRACTION_AND_MEMORY
    if NUM_DEVICES in annotations:
        if not (has_fraction or has_memory):
            return DEVICES_WITHOUT_PORTION
        if parse_positive_int(annotations[NUM_DEVICES]) is None:
            return DEVICES_POSITIVE
    if _requests_whole_gpu(pod):
        return FRACTION_AND_WHOLE
    wanted = annotations.get(CONTAINER_NAME)
    if wanted is not None and wanted not in {str(c.get("name")) for c in _containers(pod)}:
        return f"gpu-fraction-container-name annotation names container {shown(wanted)}, which the pod does not have"
    return sharing.container_problem(pod)


@dataclass(frozen=True)
class Mutation:
    patch: list[dict] = field(default_factory=list)  # JSON Patch operations
    warnings: list[str] = field(default_factory=list)


def mutate_pod(pod: Mapping, *, runtime_class: str, runtime_class_exists: bool, gpu_sharing: bool = True,
               random7: str = "0000000", mode: str = DEFAULT_MODE) -> Mutation:
    """A valid fraction pod's GPU container gets what its mode passes the GPU by (`sharing.mode_patch`: the env
    from the pod's GPU ConfigMaps, KAI's names, `random7` making the prefix unique; or NvFractions'
    annotations), and `runtimeClassName` is injected when the pod has none, only if that RuntimeClass exists."""
    if not is_sharing_request(pod) or validate_pod(pod, gpu_sharing=gpu_sharing, mode=mode) is not None:
        return Mutation()
    annotations = _annotations(pod)
    if FRACTION not in annotations and GPU_MEMORY not in annotations and not (
            container_gpu.has_memory_annotations(annotations)):
        return Mutation()
    patch = sharing.mode_patch(pod, mode, random7)
    if not runtime_class or _map(pod.get("spec")).get("runtimeClassName"):
        return Mutation(patch=patch)
    if not runtime_class_exists:
        return Mutation(patch=patch, warnings=[
            f"RuntimeClass {runtime_class!r} does not exist in the cluster: runtimeClassName not injected into "
            f"GPU-sharing pod {pod_display_name(pod)}"])
    return Mutation(patch=[*patch, {"op": "add", "path": "/spec/runtimeClassName", "value": runtime_class}])


# ---- queues ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    denial: str | None = None
    warnings: list[str] = field(default_factory=list)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an integer past a float's range: 10**400
            return None
        return number if math.isfinite(number) else None
    try:
        number = float(str(value))
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _name(queue: Mapping) -> str:
    return str(_map(queue.get("metadata")).get("name") or "")


def _parent(queue: Mapping) -> str:
    return str(_map(queue.get("spec")).get("parentQueue") or "")


def _quota(queue: Mapping, resource: str) -> float:
    value = _number(_map(_map(_map(queue.get("spec")).get("resources")).get(resource)).get("quota"))
    return value if value is not None else 0.0


def _resource_problems(resource: str, section: object) -> tuple[list[str], list[str]]:
    """Errors and warnings for one `resources.<r>` section."""
    errors: list[str] = []
    warnings: list[str] = []
    where = f"resources.{resource}"
    if section is None:
        warnings.append(f"{where} omitted: Shoal reads it as quota 0 and limit 0, so pods of this queue that "
                        f"request {resource} are never scheduled (OverLimit)")
        return errors, warnings
    if not isinstance(section, Mapping):
        return [f"{where}: must be an object with quota, limit and overQuotaWeight"], warnings
    values: dict[str, float | None] = {}
    for key in ("quota", "limit", "overQuotaWeight"):
        if key not in section or section[key] is None:
            values[key] = None
            continue
        number = _number(section[key])
        if number is None:
            errors.append(f"{where}.{key}: must be a number, got {shown(section[key])}")
        elif key == "overQuotaWeight" and number < 0:
            errors.append(f"{where}.overQuotaWeight: must be >= 0, got {fmt(number)}")
        elif number < 0 and number != UNLIMITED:
            errors.append(f"{where}.{key}: must be -1 (unlimited) or >= 0, got {fmt(number)}")
        values[key] = number
    if errors:
        return errors, warnings
    quota, limit = values["quota"] or 0.0, values["limit"]
    if limit is None:
        warnings.append(f"{where}: limit omitted: Shoal reads it as limit = quota ({fmt(quota)})")
    elif limit == 0 and quota != 0:  # SPEC §2.1: an explicit 0 is a cap of 0, allowed with a warning
        warnings.append(f"{where}: explicit limit 0 is a hard cap of 0 although quota is {fmt(quota)}: the queue "
                        f"can never use its quota (omit limit for limit = quota, or set -1 for unlimited)")
    elif limit != UNLIMITED and quota != UNLIMITED and limit < quota:
        errors.append(f"{where}.limit ({fmt(limit)}) must not be below quota ({fmt(quota)}); use -1 for unlimited")
    return errors, warnings


def validate_queue(operation: str, queue: Mapping, old: Mapping | None, queues: Iterable[Mapping]) -> Verdict:
    """Admission verdict for a Queue CREATE/UPDATE/DELETE, given every queue that exists now."""
    existing = {_name(q): q for q in queues if isinstance(q, Mapping) and _name(q)}
    if operation == "DELETE":
        target = _name(old or queue)
        children = sorted(n for n, q in existing.items() if _parent(q) == target and n != target)
        if children:
            return Verdict(denial=f"queue {target!r} still has child queues: {', '.join(children)}; "
                                  f"delete or move them first")
        return Verdict()
    name = _name(queue)
    spec = queue.get("spec")
    if not isinstance(spec, Mapping):
        return Verdict(denial="spec must be specified")
    resources = spec.get("resources")
    if not isinstance(resources, Mapping):
        return Verdict(denial="resources must be specified")
    errors: list[str] = []
    warnings: list[str] = []
    for resource in RESOURCES:
        more_errors, more_warnings = _resource_problems(resource, resources.get(resource))
        errors += more_errors
        warnings += more_warnings
    parent = _parent(queue)
    if parent and parent == name:
        errors.append(f"parentQueue: a queue cannot be its own parent ({shown(name)})")
    elif parent and parent not in existing and operation == "CREATE":
        errors.append(f"parentQueue: parent queue {shown(parent)} does not exist; create it first")
    elif parent:
        cycle = _cycle(name, parent, existing)
        if cycle:
            errors.append(f"parentQueue: {shown(parent)} would make a cycle: {' -> '.join(cycle)}")
    if errors:
        return Verdict(denial="; ".join(errors), warnings=warnings)
    existing[name] = queue
    if parent and parent in existing:
        warnings += _children_over_parent(parent, existing)
    if any(_parent(q) == name for q in existing.values()):
        warnings += _children_over_parent(name, existing)
    return Verdict(warnings=warnings)


def _cycle(name: str, parent: str, queues: Mapping[str, Mapping]) -> list[str]:
    """The ancestor path back to `name` if `name` under `parent` closes a loop, else []."""
    path, current = [name, parent], parent
    while current in queues and len(path) <= len(queues) + 1:
        current = _parent(queues[current])
        if not current:
            return []
        path.append(current)
        if current == name:
            return path
    return []


def _children_over_parent(parent: str, queues: Mapping[str, Mapping]) -> list[str]:
    children = [q for n, q in queues.items() if _parent(q) == parent and n != parent]
    warnings = []
    for resource in RESOURCES:
        limit = _quota(queues[parent], resource)
        if limit == UNLIMITED:
            continue
        quotas = [_quota(c, resource) for c in children]
        if any(q == UNLIMITED for q in quotas):
            continue
        total = sum(quotas)
        if total > limit:
            warnings.append(f"child queues of {parent!r} have {resource} quotas summing to {fmt(total)}, more than "
                            f"its quota {fmt(limit)}")
    return warnings


def pod_event(pod: Mapping, reason: str, message: str, *, now: str | None = None) -> dict:
    """A core/v1 Warning event on a pod, from shoal-admission."""
    now = now or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = _map(pod.get("metadata"))
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    digest = hashlib.sha256(f"{namespace}/{name}/{reason}/{message}/{now}".encode()).hexdigest()[:10]
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{name[:200]}.{digest}", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": namespace,
                               "uid": str(meta.get("uid") or "")},
            "reason": reason, "message": message[:1024], "type": "Warning",
            "source": {"component": "shoal-admission"}, "reportingComponent": "shoal-admission",
            "reportingInstance": "shoal-admission", "firstTimestamp": now, "lastTimestamp": now, "count": 1}

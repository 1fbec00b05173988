"""KAI v0.18 per-container GPU annotations (`nvidia.com/container.<name>.…`), parsed and checked.

- `.gpu-memory.request` / `.gpu-memory.limit`: Kubernetes memory quantities > 0 (rounded up to MiB). A limit
  alone is also the request; request > limit is refused; request < limit is a dynamic fraction (placed on the
  request, may use up to the limit).
- `.gpu-compute.mode`: `time-slicing` (the default) or `sm-sharing`.
- `.gpus.devices` and `.gpu-compute.portion` are written by the binder, never part of a request.
- Every annotation must name one and the same container, which must be one of the pod's containers.

Malformed values give KAI's admission texts; the caller turns them into a condition, never an exception.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from shoal.core.ingest.quantity import QuantityError, parse_quantity
from shoal.core.sharing_mode import COMPUTE_MODES

PREFIX = "nvidia.com/container."
REQUEST = ".gpu-memory.request"
LIMIT = ".gpu-memory.limit"
COMPUTE_MODE = ".gpu-compute.mode"
DEVICES = ".gpus.devices"  # binder-owned
COMPUTE_PORTION = ".gpu-compute.portion"  # binder-owned
BINDER_OWNED = (DEVICES, COMPUTE_PORTION)
CONTAINER_NAME = "gpu-fraction-container-name"
MIB = 2**20
MAX_MIB = 2**31  # 2 PiB: more than any GPU has; larger values are refused, never turned into huge integers

MSG_MULTIPLE_CONTAINERS = "currently, kai doesn't support multiple containers with fractional GPU requests"


@dataclass(frozen=True)
class ContainerGpu:
    container: str
    request_mib: int | None = None  # set whenever a request or a limit is given
    limit_mib: int | None = None
    compute_mode: str | None = None  # None: not given (time-slicing)


def request_key(container: str) -> str:
    return f"{PREFIX}{container}{REQUEST}"


def limit_key(container: str) -> str:
    return f"{PREFIX}{container}{LIMIT}"


def compute_mode_key(container: str) -> str:
    return f"{PREFIX}{container}{COMPUTE_MODE}"


def devices_key(container: str) -> str:
    return f"{PREFIX}{container}{DEVICES}"


def is_binder_owned(key: str) -> bool:
    return key.startswith(PREFIX) and key.endswith(BINDER_OWNED)


def has_container_annotations(annotations: Mapping[str, str]) -> bool:
    return any(k.startswith(PREFIX) and not k.endswith(BINDER_OWNED) for k in annotations)


def has_memory_annotations(annotations: Mapping[str, str]) -> bool:
    """A per-container GPU memory request or limit: a GPU-sharing request (a compute mode alone is not)."""
    return any(k.startswith(PREFIX) and k.endswith((REQUEST, LIMIT)) for k in annotations)


def annotated_container(annotations: Mapping[str, object]) -> str | None:
    """The container the first (sorted) request/limit/compute-mode annotation names, if any."""
    for key in sorted(annotations):
        if key.startswith(PREFIX):
            rest = key[len(PREFIX):]
            for suffix in (REQUEST, LIMIT, COMPUTE_MODE):
                if rest.endswith(suffix) and len(rest) > len(suffix):
                    return rest[: -len(suffix)]
    return None


def compute_mode_of(annotations: Mapping[str, str]) -> str | None:
    """The pod's (valid) compute mode, whichever container it names; None when not given."""
    for key in sorted(annotations):
        if key.startswith(PREFIX) and key.endswith(COMPUTE_MODE) and annotations[key] in COMPUTE_MODES:
            return annotations[key]
    return None


def _memory_mib(value: str) -> int | None:
    """A memory quantity in MiB, rounded up; None unless it is a quantity > 0."""
    try:
        amount = parse_quantity(value)
    except QuantityError:
        return None
    if amount <= 0 or amount > MAX_MIB * MIB:
        return None
    return int(-(-amount // MIB))


def container_gpu_of(annotations: Mapping[str, str],
                     containers: Collection[str]) -> tuple[ContainerGpu | None, str | None]:
    """(request, None), (None, message) for a malformed one, (None, None) when the pod has none."""
    name: str | None = None
    request = limit = None
    mode = None
    for key in sorted(annotations):
        if not key.startswith(PREFIX) or key.endswith(BINDER_OWNED):
            continue
        value = annotations[key]
        rest = key[len(PREFIX):]
        for suffix in (REQUEST, LIMIT, COMPUTE_MODE):
            if rest.endswith(suffix) and len(rest) > len(suffix):
                container = rest[: -len(suffix)]
                break
        else:
            return None, f"invalid NvFractions annotation key: {key}"
        if name is not None and container != name:
            return None, MSG_MULTIPLE_CONTAINERS
        name = container
        if suffix == COMPUTE_MODE:
            if value not in COMPUTE_MODES:
                return None, f"invalid NvFractions compute mode: {value}"
            mode = value
            continue
        mib = _memory_mib(value)
        if mib is None:
            return None, f"{key} annotation value must be a valid Kubernetes memory quantity greater than 0"
        if suffix == REQUEST:
            request = mib
        else:
            limit = mib
    if name is None:
        return None, None
    if name not in containers:
        return None, f"container {name} not found in pod spec, but a fractional annotation referencing it was found"
    if request is not None and limit is not None and request > limit:
        return None, f"invalid fraction request for container {name}: request is greater than limit"
    if request is None:
        request = limit
    return ContainerGpu(container=name, request_mib=request, limit_mib=limit, compute_mode=mode), None

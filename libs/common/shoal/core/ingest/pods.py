"""Pod manifests → model.Pod (requests, GPU fractions, placement constraints, state)."""

from __future__ import annotations

from collections.abc import Mapping

from shoal.core.ingest.common import (
    IngestError,
    as_list,
    as_map,
    metadata,
    name_of,
    namespace_of,
    norm_time,
    str_map,
    uid_of,
)
from shoal.core.ingest.container_gpu import (
    CONTAINER_NAME,
    compute_mode_of,
    container_gpu_of,
    has_container_annotations,
)
from shoal.core.ingest.quantity import QuantityError, milli_units, parse_quantity
from shoal.core.kai_labels import FRACTION, GPU_MEMORY, NUM_DEVICES, gpu_groups_of
from shoal.core.model import (
    LABEL_BACKGROUND,
    LABEL_TASK_PRIORITY,
    PHASE_PENDING,
    PHASE_RUNNING,
    FractionRequest,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    Toleration,
)

GPU_RESOURCE = "nvidia.com/gpu"

MSG_FRACTION_RANGE = "gpu-fraction annotation value must be a positive number smaller than 1.0"
MSG_FRACTION_AND_WHOLE = "cannot have both GPU fraction request and whole GPU resource request/limit"
MSG_MEMORY_POSITIVE = "gpu-memory annotation value must be a positive integer greater than 0"
MSG_FRACTION_AND_MEMORY = "cannot request both GPU and GPU memory"
MSG_DEVICES_WITHOUT_FRACTION = (
    "cannot request multiple fractional devices without specifying fraction portion or gpu-memory"
)
MSG_DEVICES_POSITIVE = "gpu-fraction-num-devices annotation value must be a positive integer greater than 0"
MSG_LIMIT_WITH_LEGACY = "cannot combine nvidia.com/container. limit annotation with gpu-fraction or gpu-memory annotation"


def _container_requests(container: Mapping, field: str) -> dict[str, int]:
    """Requests in thousandths of the resource's unit (limits stand in for missing requests)."""
    resources = container.get("resources")
    if not resources:
        return {}
    resources = as_map(resources, f"{field}.resources")
    requests = as_map(resources.get("requests"), f"{field}.resources.requests")
    limits = as_map(resources.get("limits"), f"{field}.resources.limits")
    out: dict[str, int] = {}
    for source, where in ((limits, "limits"), (requests, "requests")):  # requests win; limits default them
        for key, value in source.items():
            try:
                amount = milli_units(value)
            except QuantityError as exc:
                raise IngestError(f"{field}.resources.{where}.{key}", str(exc)) from None
            if amount < 0:
                raise IngestError(f"{field}.resources.{where}.{key}", "must not be negative")
            out[key] = amount
    return out


def pod_requests(spec: Mapping) -> dict[str, int]:
    """Effective requests in thousandths: max(sum over containers, max over init containers)."""
    total: dict[str, int] = {}
    for i, raw in enumerate(as_list(spec.get("containers"), "spec.containers")):
        for key, amount in _container_requests(as_map(raw, f"spec.containers[{i}]"), f"spec.containers[{i}]").items():
            total[key] = total.get(key, 0) + amount
    init = spec.get("initContainers")
    for i, raw in enumerate(as_list(init, "spec.initContainers") if init else ()):
        field = f"spec.initContainers[{i}]"
        for key, amount in _container_requests(as_map(raw, field), field).items():
            total[key] = max(total.get(key, 0), amount)
    return total


def fraction_of(annotations: Mapping[str, str], whole_gpus: int,
                containers: tuple[str, ...] = ()) -> tuple[FractionRequest | None, str | None]:
    """(request, None) for a valid fraction, (None, message) for an invalid one, (None, None) for none.

    `containers`: the pod's container names, for the per-container annotations (container_gpu)."""
    per_container, error = container_gpu_of(annotations, containers)
    if error:
        return None, error
    has_fraction, has_memory = FRACTION in annotations, GPU_MEMORY in annotations
    has_request = per_container is not None and per_container.request_mib is not None
    if NUM_DEVICES in annotations and not (has_fraction or has_memory or has_request):
        return None, MSG_DEVICES_WITHOUT_FRACTION
    if not (has_fraction or has_memory or has_request):
        return None, None
    if has_request and per_container.limit_mib is not None and (has_fraction or has_memory):
        return None, MSG_LIMIT_WITH_LEGACY
    if has_fraction and has_memory:
        return None, MSG_FRACTION_AND_MEMORY
    if whole_gpus > 0:
        return None, MSG_FRACTION_AND_WHOLE
    if has_request and annotations.get(CONTAINER_NAME, per_container.container) != per_container.container:
        return None, (f"gpu-fraction-container-name annotation value {annotations[CONTAINER_NAME]} does not match "
                      f"container name {per_container.container}")
    devices = 1
    if NUM_DEVICES in annotations:
        text = annotations[NUM_DEVICES].strip()
        if not text.isdigit() or int(text) <= 0:
            return None, MSG_DEVICES_POSITIVE
        devices = int(text)
    portion = memory = None
    if has_fraction:
        try:
            value = parse_quantity(annotations[FRACTION])
        except QuantityError:
            return None, MSG_FRACTION_RANGE
        if not 0 < value < 1:
            return None, MSG_FRACTION_RANGE
        portion = min(max(int(-(-value * 1000 // 1)), 1), 999)
    if has_memory:
        text = annotations[GPU_MEMORY].strip()
        if not text.isdigit() or int(text) <= 0:
            return None, MSG_MEMORY_POSITIVE
        memory = int(text)
    if has_request:  # the per-container request wins over gpu-fraction; gpu-memory must agree with it
        request = per_container.request_mib
        if memory is not None and memory != request:
            return None, (f"NvFractions memory request ({request}Mi) does not match gpu-memory annotation value "
                          f"({memory} MiB)")
        limit = per_container.limit_mib if per_container.limit_mib != request else None
        return FractionRequest(gpu_memory_mib=request, num_devices=devices, gpu_memory_limit_mib=limit), None
    if portion is not None:
        return FractionRequest(portion_milli=portion, num_devices=devices), None
    return FractionRequest(gpu_memory_mib=memory, num_devices=devices), None


def _tolerations(spec: Mapping) -> tuple[Toleration, ...]:
    if not spec.get("tolerations"):
        return ()
    out = []
    for i, raw in enumerate(as_list(spec.get("tolerations"), "spec.tolerations")):
        tol = as_map(raw, f"spec.tolerations[{i}]")
        out.append(Toleration(key=str(tol.get("key") or ""), operator=str(tol.get("operator") or "Equal"),
                              value=str(tol.get("value") or ""), effect=str(tol.get("effect") or "")))
    return tuple(out)


def _affinity_terms(spec: Mapping) -> tuple[NodeSelectorTerm, ...]:
    if not spec.get("affinity"):
        return ()
    affinity = as_map(spec.get("affinity"), "spec.affinity")
    node_affinity = as_map(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = as_map(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), base)
    terms = []
    for i, raw in enumerate(as_list(required.get("nodeSelectorTerms"), f"{base}.nodeSelectorTerms")):
        term = as_map(raw, f"{base}.nodeSelectorTerms[{i}]")
        reqs = []
        for j, expr_raw in enumerate(as_list(term.get("matchExpressions"), f"{base}.nodeSelectorTerms[{i}].matchExpressions")):
            expr = as_map(expr_raw, f"{base}.nodeSelectorTerms[{i}].matchExpressions[{j}]")
            op = str(expr.get("operator") or "")
            if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
                raise IngestError(f"{base}.nodeSelectorTerms[{i}].matchExpressions[{j}].operator",
                                  f"unknown operator {op!r}")
            reqs.append(NodeSelectorRequirement(key=str(expr.get("key") or ""), operator=op,
                                                values=tuple(str(v) for v in as_list(expr.get("values"), f"{base}.nodeSelectorTerms[{i}].matchExpressions[{j}].values"))))
        terms.append(NodeSelectorTerm(match_expressions=tuple(reqs)))
    return tuple(terms)


def pod_from(obj: Mapping, *, pod_group: str, subgroup: str | None, managed: bool, now: str,
             binding: tuple[str, tuple[str, ...]] | None = None) -> Pod:
    """`binding` = (node, gpu groups) of an in-flight BindRequest for a pod not yet bound."""
    name = name_of(obj)
    meta = metadata(obj)
    labels = str_map(meta.get("labels"), "metadata.labels")
    annotations = str_map(meta.get("annotations"), "metadata.annotations")
    spec = as_map(obj.get("spec"), "spec")
    status = as_map(obj.get("status"), "status")
    requests = pod_requests(spec)
    gpu_milli = requests.get(GPU_RESOURCE, 0)
    if gpu_milli % 1000:
        raise IngestError(f"spec.containers.resources.{GPU_RESOURCE}", "must be a whole number of GPUs")
    whole_gpus = gpu_milli // 1000
    fraction, fraction_error = (None, None)
    compute_mode = None
    if annotations and (FRACTION in annotations or GPU_MEMORY in annotations or NUM_DEVICES in annotations
                        or has_container_annotations(annotations)):
        containers = tuple(str(c.get("name") or "") for c in as_list(spec.get("containers"), "spec.containers")
                           if isinstance(c, Mapping))
        fraction, fraction_error = fraction_of(annotations, whole_gpus, containers)
        compute_mode = compute_mode_of(annotations)
    node_name = spec.get("nodeName") or None
    groups = gpu_groups_of(labels)
    if node_name is None and binding is not None:
        node_name, groups = binding[0], binding[1] or groups
    phase = str(status.get("phase") or "")
    if not phase:
        phase = PHASE_RUNNING if node_name else PHASE_PENDING
    task_priority = None
    if labels.get(LABEL_TASK_PRIORITY):
        try:
            task_priority = int(labels[LABEL_TASK_PRIORITY])
        except ValueError:
            raise IngestError(f"metadata.labels.{LABEL_TASK_PRIORITY}", "must be an integer") from None
    owner_kind = owner_name = None
    for ref in as_list(meta.get("ownerReferences"), "metadata.ownerReferences"):
        if isinstance(ref, Mapping) and (ref.get("controller") or owner_kind is None):
            owner_kind, owner_name = str(ref.get("kind") or ""), str(ref.get("name") or "")
    created = meta.get("creationTimestamp")
    return Pod(
        uid=uid_of(obj, "Pod"),
        namespace=namespace_of(obj),
        name=name,
        pod_group=pod_group,
        subgroup=subgroup,
        cpu_milli=requests.get("cpu", 0),
        memory_bytes=-(-requests.get("memory", 0) // 1000),
        gpus=whole_gpus,
        fraction=fraction,
        fraction_error=fraction_error,
        node_selector=str_map(spec.get("nodeSelector"), "spec.nodeSelector"),
        affinity_terms=_affinity_terms(spec),
        tolerations=_tolerations(spec),
        phase=phase,
        node_name=str(node_name) if node_name else None,
        nominated_node=str(status["nominatedNodeName"]) if status.get("nominatedNodeName") else None,
        gpu_groups=groups,
        created=norm_time(created, "metadata.creationTimestamp") if created else now,
        task_priority=task_priority,
        labels=labels,
        deleting=bool(meta.get("deletionTimestamp")),
        gated=bool(spec.get("schedulingGates")),
        gates=_gate_names(spec.get("schedulingGates")),
        managed=managed,
        background=managed and bool(node_name) and labels.get(LABEL_BACKGROUND) == "true",
        owner_kind=owner_kind,
        owner_name=owner_name,
        compute_mode=compute_mode,
    )


def _gate_names(value: object) -> tuple[str, ...]:
    gates = value if isinstance(value, list) else []
    return tuple(sorted({str(g["name"]) for g in gates if isinstance(g, Mapping) and g.get("name")}))

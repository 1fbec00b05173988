"""Message templates for fit errors, PodSchedulingErrors, NotReady and pod events, built in one place.

The OverLimit / NonPreemptibleOverQuota / QueueDoesNotExist texts live in capacity.py.

Fit-error aggregation (KAI §2.2): every node that rejected the task contributes its *first* failing
reason; the reasons are counted, rendered as "<n> node(s) <reason>", sorted as strings, joined with
", " and wrapped as "no nodes with enough resources were found: <...>.".
"""

from __future__ import annotations

# reason codes and condition reasons
POD_SCHEDULING_ERRORS = "PodSchedulingErrors"
NOT_READY = "NotReady"
UNSCHEDULABLE = "Unschedulable"

# per-node predicate reasons (rendered after "<n> node(s) ")
NODE_GPUS = "didn't have enough resources: GPUs"
NODE_CPU = "didn't have enough resources: CPU cores"
NODE_MEMORY = "didn't have enough resources: memory"
NODE_GPU_MEMORY = "didn't have enough resources: GPU memory"
NODE_PODS = "didn't have enough resources: pods"
NODE_GPU_MEMORY_NOT_SYNCED = "node is not a gpu node or the gpu memory count on the node was not synced yet"
NODE_NOT_READY = "were not ready"
NODE_UNSCHEDULABLE = "were unschedulable"
NODE_SELECTOR = "didn't match Pod's node affinity/selector"
NODE_MIG = "have MIG enabled and cannot host fractional GPUs"
NO_NODES = "no nodes with enough resources were found"


def node_compute_mode(mode: str) -> str:
    """A fraction that would fit on the node's shared GPUs, were they not of the other compute mode (KAI v0.18)."""
    return f"didn't have enough resources: GPUs (shared GPUs with room hold pods of another compute mode than {mode})"


def node_taint(key: str, value: str) -> str:
    return f"had untolerated taint {{{key}: {value}}}"


def fit_error(reason_counts: dict[str, int]) -> str:
    if not reason_counts:
        return f"{NO_NODES}: 0 nodes in the node pool."
    parts = sorted(f"{n} node(s) {r}" for r, n in reason_counts.items())
    return f"{NO_NODES}: {', '.join(parts)}."


def gang_error(found: int, required: int, fit: str) -> str:
    return (
        f"Resources were found for {found} pods while {required} are required for gang scheduling. "
        f"Additional pods cannot be scheduled due to: {fit}"
    )


def subgroup_gang_error(found: int, subgroup: str, required: int, fit: str) -> str:
    return (
        f"Resources were found for {found} pods from all sub-groups while sub-group {subgroup} requires "
        f"{required} pods for gang scheduling. Additional pods cannot be scheduled in this sub-group due to: {fit}"
    )


def pod_error(pod_key: str, fit: str) -> str:
    return f"Resources were not found for pod {pod_key} due to: {fit}"


def invalid_gpu_request(pod_key: str, error: str) -> str:
    return f"Pod {pod_key} has an invalid GPU sharing request: {error}"


def not_ready(min_member: int, existing: int, gated: int, gates: tuple[str, ...] = ()) -> str:
    """KAI's NotReady text; with gated pods Shoal adds what they wait for (the job is waiting, not broken)."""
    text = (
        f"Job is not ready for scheduling. Waiting for {min_member} pods, currently {existing} exist, "
        f"{gated} are gated"
    )
    if gated:
        names = f": {', '.join(gates)}" if gates else ""
        text += f". Gated pods wait until their scheduling gates are removed{names}"
    return text


def condition_message(reasons: list[tuple[str, str]]) -> str:
    """`<Reason>: <message>.` for one reason, "Unable to schedule podgroup: ..." for several."""
    if len(reasons) == 1:
        reason, message = reasons[0]
        return f"{reason}: {message.rstrip('.')}."
    joined = "; ".join(f"{r}: {m.rstrip('.')}" for r, m in reasons)
    return f"Unable to schedule podgroup: {joined}."


def scheduled_event(pod_key: str, node: str, pool: str) -> str:
    return f"Successfully assigned pod {pod_key} to node {node} at node-pool {pool or 'default'}"


def pipelined_event(pod_key: str, node: str) -> str:
    return f"Pod {pod_key} was pipelined to node {node}"


def binding_error_event(pod_key: str, node: str, error: str) -> str:
    """The binder's BindingError event when the apiserver refuses a planned bind."""
    return f"Failed to bind pod {pod_key} to node {node}: {error}"

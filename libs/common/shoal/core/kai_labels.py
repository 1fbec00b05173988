"""KAI's label and annotation names that Shoal reads and writes on pods and nodes, each named once, and the layout
of the shared-GPU label.

A fractional pod and the reservation pod of its shared GPU carry the GPU's group: with one device
`runai-gpu-group=<group>`, with several `runai-gpu-group/<group>=<group>` for each (KAI's binder writes them so;
the snapshot, the binder, the node agent and `shoal simulate` read and write them only through this module).

    gpu_group_labels(("g1",))        # {"runai-gpu-group": "g1"}
    gpu_groups_of({"runai-gpu-group/g2": "g2", "runai-gpu-group/g1": "g1"})  # ("g1", "g2")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

GPU_GROUP_LABEL = "runai-gpu-group"
NODE_POOL_LABEL = "kai.scheduler/node-pool"
QUEUE_LABEL = "kai.scheduler/queue"
QUEUE_LABELS = (QUEUE_LABEL, "runai/queue")  # read in this order (the second is Run:ai's older name)
POD_GROUP_ANNOTATION = "pod-group-name"
FRACTION = "gpu-fraction"
FRACTION_LIMIT = "gpu-fraction-limit"
GPU_MEMORY = "gpu-memory"
GPU_MEMORY_LIMIT = "gpu-memory-limit"
NUM_DEVICES = "gpu-fraction-num-devices"
RECEIVED_TYPE = "received-resource-type"  # written on bind: Regular | Fraction
RESERVE_GPU_ANNOTATION = "run.ai/reserve_for_gpu_index"  # a reservation pod's GPU id, written on its node
GPU_SHARED_LABEL = "shoal.io/gpu-shared"  # Shoal's mark on every fractional pod it binds (reservation GC selects on it)

_GROUP_PREFIX = GPU_GROUP_LABEL + "/"


def gpu_group_labels(groups: Sequence[str]) -> dict[str, str]:
    """The labels that put a pod in `groups`: one group → `runai-gpu-group=<g>`; several → `runai-gpu-group/<g>=<g>`."""
    if len(groups) == 1:
        return {GPU_GROUP_LABEL: groups[0]}
    return {_GROUP_PREFIX + g: g for g in groups}


def is_gpu_group_label(key: str) -> bool:
    return key == GPU_GROUP_LABEL or key.startswith(_GROUP_PREFIX)


def gpu_groups_of(labels: Mapping[str, str]) -> tuple[str, ...]:
    """The shared-GPU groups the labels name, sorted; a `runai-gpu-group/<g>` label with no value names `<g>`."""
    if not any(key.startswith(GPU_GROUP_LABEL) for key in labels):
        return ()
    groups = set()
    if labels.get(GPU_GROUP_LABEL):
        groups.add(labels[GPU_GROUP_LABEL])
    for key, value in labels.items():
        if key.startswith(_GROUP_PREFIX):
            groups.add(value or key[len(_GROUP_PREFIX):])
    return tuple(sorted(groups))

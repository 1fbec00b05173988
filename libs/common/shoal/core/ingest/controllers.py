"""Acting as the workload controllers for `shoal simulate`: pods for owners that have none.

`expand_workloads(objects)` returns the pods (and JobSet Jobs) the Kubernetes controllers would
create for each workload in the input that has no pod yet. Names and uids are deterministic:
- batch Job → `min(parallelism, completions)` pods `<job>-<index>` (parallelism defaults to 1);
- Deployment / ReplicaSet / StatefulSet → `replicas` pods `<owner>-<index>` (default 1);
- PyTorchJob/TFJob/XGBoostJob/JAXJob/MPIJob → `<job>-<role>-<index>` per replica spec, with the
  `training.kubeflow.org/job-role` / `replica-type` labels;
- JobSet → Jobs `<jobset>-<replicatedJob>-<index>` and their pods `<job>-<index>`;
- LeaderWorkerSet → per group g: leader `<lws>-<g>` and workers `<lws>-<g>-<w>`;
- RayCluster → `<cluster>-head` and `<cluster>-<group>-worker-<index>` (minReplicas, else replicas).
`recreate_pod(pod, suffix)` is the controller replacing an evicted pod.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence

from shoal.core.fields import items, mapping
from shoal.core.ingest.common import IngestError, Problem
from shoal.core.ingest.grouping import KUBEFLOW_SPECS, object_uid, stable_uid
from shoal.core.kai_labels import is_gpu_group_label

ROLE_LABEL = "training.kubeflow.org/job-role"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"


def _plain_map(value: object) -> dict:
    return {str(k): v for k, v in value.items()} if isinstance(value, Mapping) else {}


MAX_PODS_PER_OWNER = 100_000  # Kubernetes' own bound on an indexed Job's completions and parallelism
MAX_PODS = 1_000_000  # what one `shoal simulate` run expands in all


class TooManyPods(IngestError):
    """A workload that would expand to more pods than simulate makes (reported, never attempted)."""


def _count(value: object, default: int, field: str = "spec.replicas") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    if value > MAX_PODS_PER_OWNER:
        raise TooManyPods(field, f"{value} is more pods than simulate makes for one workload "
                                 f"(at most {MAX_PODS_PER_OWNER:,})")
    return max(value, 0)


def _guard(made: int) -> None:
    """Stop a workload whose pods, all together, pass MAX_PODS_PER_OWNER (replicas x size, x parallelism)."""
    if made > MAX_PODS_PER_OWNER:
        raise TooManyPods("spec", f"its pods number more than {MAX_PODS_PER_OWNER:,}, the most simulate makes for "
                                  "one workload")


def _owner_ref(owner: Mapping) -> dict:
    return {"apiVersion": str(owner.get("apiVersion") or ""), "kind": str(owner.get("kind") or ""),
            "name": str(mapping(owner, "metadata").get("name") or ""), "uid": object_uid(owner), "controller": True}


def _pod(owner: Mapping, template: Mapping, name: str, labels: Mapping[str, str] | None = None) -> dict:
    tmeta = mapping(template, "metadata")
    ometa = mapping(owner, "metadata")
    namespace = str(ometa.get("namespace") or "default")
    metadata: dict = {
        "name": name,
        "namespace": namespace,
        "uid": stable_uid("Pod", namespace, name),
        "labels": {**_plain_map(tmeta.get("labels")), **dict(labels or {})},
        "annotations": _plain_map(tmeta.get("annotations")),
        "ownerReferences": [_owner_ref(owner)],
    }
    if ometa.get("creationTimestamp"):
        metadata["creationTimestamp"] = ometa["creationTimestamp"]
    for key in ("labels", "annotations"):
        if not metadata[key]:
            del metadata[key]
    spec = copy.deepcopy(dict(mapping(template, "spec")))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": "Pending"}}


def _job_pods(job: Mapping) -> list[dict]:
    spec = mapping(job, "spec")
    parallelism = _count(spec.get("parallelism"), 1, "spec.parallelism")
    completions = spec.get("completions")
    if isinstance(completions, int) and not isinstance(completions, bool):
        parallelism = min(parallelism, max(completions, 0))
    name = str(mapping(job, "metadata").get("name"))
    template = spec.get("template") if isinstance(spec.get("template"), Mapping) else {}
    return [_pod(job, template, f"{name}-{i}", {"batch.kubernetes.io/job-name": name}) for i in range(parallelism)]


def _replica_pods(owner: Mapping) -> list[dict]:
    spec = mapping(owner, "spec")
    name = str(mapping(owner, "metadata").get("name"))
    template = spec.get("template") if isinstance(spec.get("template"), Mapping) else {}
    return [_pod(owner, template, f"{name}-{i}") for i in range(_count(spec.get("replicas"), 1))]


def _kubeflow_pods(job: Mapping) -> list[dict]:
    specs = mapping(job, "spec").get(KUBEFLOW_SPECS[str(job.get("kind"))])
    name = str(mapping(job, "metadata").get("name"))
    pods = []
    specs = mapping(specs)
    for role in sorted(specs, key=str):
        rs = specs[role]
        if not isinstance(rs, Mapping):
            continue
        template = rs.get("template") if isinstance(rs.get("template"), Mapping) else {}
        lower = str(role).lower()
        labels = {ROLE_LABEL: lower, REPLICA_TYPE_LABEL: lower}
        for i in range(_count(rs.get("replicas"), 1, f"spec.{KUBEFLOW_SPECS[str(job.get('kind'))]}.{role}.replicas")):
            pods.append(_pod(job, template, f"{name}-{lower}-{i}", labels))
        _guard(len(pods))
    return pods


def _jobset_objects(jobset: Mapping) -> list[dict]:
    name = str(mapping(jobset, "metadata").get("name"))
    namespace = str(mapping(jobset, "metadata").get("namespace") or "default")
    out: list[dict] = []
    for rjob in items(mapping(jobset, "spec").get("replicatedJobs")):
        if not isinstance(rjob, Mapping) or not isinstance(rjob.get("name"), str) or not rjob["name"]:
            continue
        template = rjob.get("template") if isinstance(rjob.get("template"), Mapping) else {}
        for index in range(_count(rjob.get("replicas"), 1)):
            job_name = f"{name}-{rjob['name']}-{index}"
            job = {"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": job_name, "namespace": namespace, "uid": stable_uid("Job", namespace, job_name),
                                "annotations": _plain_map(mapping(template, "metadata").get("annotations")),
                                "ownerReferences": [_owner_ref(jobset)]},
                   "spec": copy.deepcopy(dict(mapping(template, "spec")))}
            labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": str(rjob["name"]),
                      "jobset.sigs.k8s.io/job-index": str(index)}
            if mapping(jobset, "metadata").get("creationTimestamp"):
                job["metadata"]["creationTimestamp"] = mapping(jobset, "metadata")["creationTimestamp"]
            out.append(job)
            for pod in _job_pods(job):
                pod["metadata"].setdefault("labels", {}).update(labels)
                out.append(pod)
            _guard(len(out))
    return out


def _lws_pods(lws: Mapping) -> list[dict]:
    spec = mapping(lws, "spec")
    name = str(mapping(lws, "metadata").get("name"))
    template = spec.get("leaderWorkerTemplate") if isinstance(spec.get("leaderWorkerTemplate"), Mapping) else {}
    size = max(_count(template.get("size"), 1, "spec.leaderWorkerTemplate.size"), 1)
    worker = template.get("workerTemplate") if isinstance(template.get("workerTemplate"), Mapping) else {}
    leader = template.get("leaderTemplate") if isinstance(template.get("leaderTemplate"), Mapping) else worker
    pods = []
    for group in range(_count(spec.get("replicas"), 1)):
        _guard(len(pods) + size)
        base = {"leaderworkerset.sigs.k8s.io/name": name, "leaderworkerset.sigs.k8s.io/group-index": str(group)}
        pods.append(_pod(lws, leader, f"{name}-{group}", {**base, "leaderworkerset.sigs.k8s.io/worker-index": "0"}))
        for w in range(1, size):
            pods.append(_pod(lws, worker, f"{name}-{group}-{w}",
                             {**base, "leaderworkerset.sigs.k8s.io/worker-index": str(w)}))
    return pods


def _ray_pods(cluster: Mapping) -> list[dict]:
    spec = mapping(cluster, "spec")
    name = str(mapping(cluster, "metadata").get("name"))
    head = spec.get("headGroupSpec") if isinstance(spec.get("headGroupSpec"), Mapping) else {}
    pods = [_pod(cluster, mapping(head.get("template")), f"{name}-head", {"ray.io/node-type": "head"})]
    for group in items(spec.get("workerGroupSpecs")):
        if not isinstance(group, Mapping):
            continue
        count = _count(group.get("minReplicas"), _count(group.get("replicas"), 0, "spec.workerGroupSpecs.replicas"),
                       "spec.workerGroupSpecs.minReplicas")
        gname = str(group.get("groupName") or "workers")
        _guard(len(pods) + count)
        for i in range(count):
            pods.append(_pod(cluster, mapping(group.get("template")), f"{name}-{gname}-worker-{i}",
                             {"ray.io/node-type": "worker", "ray.io/group": gname}))
    return pods


EXPANDERS = {
    "Job": _job_pods,
    "Deployment": _replica_pods,
    "ReplicaSet": _replica_pods,
    "StatefulSet": _replica_pods,
    "JobSet": _jobset_objects,
    "LeaderWorkerSet": _lws_pods,
    "RayCluster": _ray_pods,
    **{kind: _kubeflow_pods for kind in KUBEFLOW_SPECS},
}


def _owned_keys(objects: Iterable[Mapping]) -> set[tuple[str, str, str]]:
    """(namespace, kind, name) and (uid) keys of every owner some object already points at."""
    owned: set[tuple[str, str, str]] = set()
    for obj in objects:
        ns = str(mapping(obj, "metadata").get("namespace") or "default")
        for ref in items(mapping(obj, "metadata").get("ownerReferences")):
            if isinstance(ref, Mapping):
                owned.add((ns, str(ref.get("kind") or ""), str(ref.get("name") or "")))
                if ref.get("uid"):
                    owned.add(("uid", "", str(ref["uid"])))
    return owned


def _identity(obj: Mapping) -> set[tuple[str, str, str]]:
    ns = str(mapping(obj, "metadata").get("namespace") or "default")
    return {(ns, str(obj.get("kind") or ""), str(mapping(obj, "metadata").get("name") or "")), ("uid", "", object_uid(obj))}


def expand_workloads(objects: Sequence[Mapping], problems: list[Problem] | None = None) -> list[dict]:
    """New objects (pods, JobSet Jobs) for the workloads in `objects` that own nothing yet.

    A Job or ReplicaSet whose controller (a JobSet, a Deployment) is expanded here is left to it. A
    workload that would make more than MAX_PODS_PER_OWNER pods, or past MAX_PODS in all, makes none:
    a Problem at its position in `objects` says so (appended to `problems` when given, else raised).
    """
    owned = _owned_keys(objects)
    expanding = [o for o in objects if str(o.get("kind") or "") in EXPANDERS and not (_identity(o) & owned)
                 and isinstance(mapping(o, "metadata").get("name"), str) and mapping(o, "metadata")["name"]]  # unnamed: ingest reports it
    expanded_ids: set[tuple[str, str, str]] = set()
    for obj in expanding:
        expanded_ids |= _identity(obj)
    created: list[dict] = []
    position = {id(o): i for i, o in enumerate(objects)}
    for obj in expanding:
        ref = next((r for r in items(mapping(obj, "metadata").get("ownerReferences")) if isinstance(r, Mapping)), None)
        if ref is not None:
            ns = str(mapping(obj, "metadata").get("namespace") or "default")
            parent = {(ns, str(ref.get("kind") or ""), str(ref.get("name") or "")), ("uid", "", str(ref.get("uid") or ""))}
            if parent & expanded_ids:
                continue
        try:
            made = EXPANDERS[str(obj.get("kind"))](obj)
            if len(created) + len(made) > MAX_PODS:
                raise TooManyPods("spec", f"its pods would take this run past {MAX_PODS:,} pods, the most "
                                          "simulate makes")
        except TooManyPods as exc:
            if problems is None:
                raise
            problems.append(Problem(position[id(obj)], exc.field, exc.message))
            continue
        created.extend(made)
    return created


def recreate_pod(pod: Mapping, name: str) -> dict:
    """A fresh pending copy of a controller-owned pod under a new name (its owner recreating it)."""
    meta = dict(mapping(pod, "metadata"))
    namespace = str(meta.get("namespace") or "default")
    labels = {k: v for k, v in _plain_map(meta.get("labels")).items()
              if not is_gpu_group_label(str(k))}
    new_meta = {k: v for k, v in meta.items()
                if k in ("namespace", "annotations", "ownerReferences", "creationTimestamp")}
    new_meta.update(name=name, uid=stable_uid("Pod", namespace, name))
    if labels:
        new_meta["labels"] = labels
    spec = {k: copy.deepcopy(v) for k, v in dict(mapping(pod, "spec")).items() if k != "nodeName"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": new_meta, "spec": spec, "status": {"phase": "Pending"}}

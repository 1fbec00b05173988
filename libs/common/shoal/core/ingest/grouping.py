"""Which PodGroup a pod belongs to when it names none (reference §1.3), as pure functions.

`group_pod(pod, owners, priority_classes)` returns the PodGroup manifest
(scheduling.run.ai/v2alpha2, exactly what the podgrouper service creates) and the subgroup
label for the pod. `OwnerIndex` resolves a pod's owner chain from the objects at hand; an
owner that is missing is still grouped by its ownerReference kind/name/uid.

Rules (KAI defaults):
- bare pod → `pg-<pod>-<podUID>`, minMember 1;
- batch Job → one PodGroup per Job `pg-<job>-<jobUID>`, minMember = annotation
  `kai.scheduler/batch-min-member`, else 1 (a CronJob's Job is grouped per Job);
- Deployment / ReplicaSet → one PodGroup per pod `pg-<pod>-<podUID>`, priority `inference`;
- StatefulSet and unknown kinds → one PodGroup per top owner, minMember 1;
- Kubeflow PyTorchJob/TFJob/MPIJob/XGBoostJob/JAXJob → gang over all replicas, or
  `runPolicy.schedulingPolicy.minAvailable`; Notebook → priority `build`;
- JobSet → root minSubGroup (batch-min-member, else 1 for InOrder startup, else the number of
  replicatedJobs), one parent subgroup per replicatedJob, one leaf per replica (minMember =
  parallelism, or the template's batch-min-member);
- LeaderWorkerSet → one PodGroup per replica group `pg-<lws>-<lwsUID>-<groupIndex>`, minMember = size;
- RayCluster / RayJob / RayService → gang over the head plus every worker group's minReplicas;
- Argo Workflow and Kubeflow TrainJob are looked through (the next owner down is grouped).
Queue: owner label `kai.scheduler/queue` (or legacy `runai/queue`), else the pod's, else
`default-queue`. Priority class: owner label `priorityClassName`, pod label, pod
`spec.priorityClassName` if that class exists, per-kind default, else `train`.
Preemptibility: owner or pod label `kai.scheduler/preemptibility`.

Skipped: a pod whose own metadata or any owner's carries `kai.scheduler/skip-podgrouper: "true"`
(annotation, as KAI reads it; a label is accepted too) is never grouped: its PodGroup is made by someone
else (Grove's KAI backend, a user) and the pod waits until the PodGroup it names exists.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from shoal.core.fields import items, mapping
from shoal.core.kai_labels import NODE_POOL_LABEL, POD_GROUP_ANNOTATION, QUEUE_LABELS

API_VERSION = "scheduling.run.ai/v2alpha2"
BATCH_MIN_MEMBER = "kai.scheduler/batch-min-member"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
SKIP_PODGROUPER = "kai.scheduler/skip-podgrouper"
TOPOLOGY_ANNOTATION = "kai.scheduler/topology"
TOPOLOGY_REQUIRED = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED = "kai.scheduler/topology-preferred-placement"
TOP_OWNER_METADATA = "kai.scheduler/top-owner-metadata"
DEFAULT_QUEUE = "default-queue"
DEFAULT_PRIORITY_CLASS = "train"

KUBEFLOW_SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
}
KIND_PRIORITY = {"Deployment": "inference", "ReplicaSet": "inference", "Service": "inference",
                 "SPOTRequest": "inference", "Notebook": "build"}
LOOK_THROUGH = {"Workflow", "TrainJob", "DynamoGraphDeployment"}
PER_POD_KINDS = {"Deployment", "ReplicaSet"}


_UID_NAMESPACE = bytes.fromhex("5f0b6a3e2f5a4d7e9c1b53686f616c00")


def stable_uid(*parts: str) -> str:
    """A deterministic UUID (RFC 4122 version 5) for objects that come without metadata.uid."""
    digest = bytearray(hashlib.sha1(_UID_NAMESPACE + "/".join(parts).encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def object_uid(obj: Mapping, default_namespace: str = "default") -> str:
    """metadata.uid, or a deterministic one derived from kind/namespace/name."""
    meta = mapping(obj, "metadata")
    if meta.get("uid"):
        return str(meta["uid"])
    namespace = str(meta.get("namespace") or default_namespace)
    return stable_uid(str(obj.get("kind") or ""), namespace, str(meta.get("name") or ""))


@dataclass(frozen=True)
class Grouping:
    podgroup: dict  # a PodGroup manifest
    subgroup: str | None = None  # value for the pod's kai.scheduler/subgroup-name label

    def pod_patch(self) -> dict:
        """The metadata patch the podgrouper applies to the pod (annotation pod-group-name, subgroup label)."""
        meta: dict = {"annotations": {POD_GROUP_ANNOTATION: self.podgroup["metadata"]["name"]}}
        if self.subgroup is not None:
            meta["labels"] = {SUBGROUP_LABEL: self.subgroup}
        return {"metadata": meta}


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items() if v is not None}


def _int(value: object, default: int) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


class OwnerIndex:
    """Owner objects by uid and by (namespace, kind, name)."""

    def __init__(self, objects: Iterable[Mapping]):
        self._by_uid: dict[str, Mapping] = {}
        self._by_name: dict[tuple[str, str, str], Mapping] = {}
        for obj in objects:
            if not isinstance(obj, Mapping) or obj.get("kind") in (None, "Pod"):
                continue
            meta = mapping(obj, "metadata")
            uid = meta.get("uid")
            if uid:
                self._by_uid[str(uid)] = obj
            key = (str(meta.get("namespace") or ""), str(obj["kind"]), str(meta.get("name") or ""))
            self._by_name[key] = obj

    def find(self, namespace: str, ref: Mapping) -> Mapping | None:
        uid = ref.get("uid")
        if uid and str(uid) in self._by_uid:
            return self._by_uid[str(uid)]
        for ns in (namespace, ""):
            obj = self._by_name.get((ns, str(ref.get("kind") or ""), str(ref.get("name") or "")))
            if obj is not None:
                return obj
        return None


def controller_ref(obj: Mapping) -> Mapping | None:
    """The controller ownerReference (else the first one), or None."""
    refs = [r for r in items(mapping(obj, "metadata").get("ownerReferences")) if isinstance(r, Mapping)]
    for ref in refs:
        if ref.get("controller"):
            return ref
    return refs[0] if refs else None


def _flagged(obj: Mapping, key: str) -> bool:
    meta = mapping(obj, "metadata")
    return any(str(mapping(meta.get(where)).get(key, "")).strip().lower() == "true"
               for where in ("annotations", "labels"))


def skips_podgrouper(pod: Mapping, owners: Iterable[Mapping] = ()) -> bool:
    """True when the pod or one of its owners says `kai.scheduler/skip-podgrouper: "true"`."""
    return _flagged(pod, SKIP_PODGROUPER) or any(_flagged(o, SKIP_PODGROUPER) for o in owners)


def owner_chain(pod: Mapping, owners: OwnerIndex) -> list[Mapping]:
    """Owners from the direct one up to the top; a missing owner becomes a stub from its ref."""
    namespace = str(mapping(pod, "metadata").get("namespace") or "default")
    chain: list[Mapping] = []
    current: Mapping = pod
    seen: set[str] = set()
    while True:
        ref = controller_ref(current)
        if ref is None:
            return chain
        ident = f"{ref.get('kind')}/{ref.get('name')}/{ref.get('uid')}"
        if ident in seen:  # an ownership cycle in bad input: stop
            return chain
        seen.add(ident)
        found = owners.find(namespace, ref)
        if found is None:
            stub = {
                "apiVersion": ref.get("apiVersion", ""),
                "kind": ref.get("kind", ""),
                "metadata": {"name": ref.get("name", ""), "namespace": namespace, "uid": ref.get("uid", "")},
            }
            chain.append(stub)
            return chain
        chain.append(found)
        current = found


def _top_owner(chain: list[Mapping]) -> tuple[Mapping | None, list[Mapping]]:
    """The owner that picks the grouper, and the chain below it (looked-through kinds skipped)."""
    kept = list(chain)
    while kept and str(kept[-1].get("kind")) in LOOK_THROUGH:
        kept.pop()
    if kept and kept[-1].get("kind") == "CronJob" and len(kept) > 1:
        kept.pop()  # a CronJob's pods are grouped per Job
    return (kept[-1] if kept else None), kept


def _first_label(objs: Iterable[Mapping], keys: Iterable[str]) -> str | None:
    keys = tuple(keys)
    for obj in objs:
        labels = _str_map(mapping(obj, "metadata").get("labels"))
        for key in keys:
            if labels.get(key):
                return labels[key]
    return None


def _replica_total(spec: Mapping, specs_key: str) -> int:
    total = 0
    replicas = spec.get(specs_key)
    if isinstance(replicas, Mapping):
        for role in sorted(replicas):
            rs = replicas[role]
            total += _int(rs.get("replicas", 1), 1) if isinstance(rs, Mapping) else 0
    return max(total, 1)


def _ray_min(spec: Mapping) -> int:
    cluster = spec.get("rayClusterSpec") if isinstance(spec.get("rayClusterSpec"), Mapping) else spec
    total = 1  # the head
    for group in items(cluster.get("workerGroupSpecs")):
        if isinstance(group, Mapping):
            total += _int(group.get("minReplicas", group.get("replicas", 0)), 0) * max(
                _int(group.get("numOfHosts", 1), 1), 1)
    return total


def _jobset_layout(jobset: Mapping, pod: Mapping, chain: list[Mapping]) -> tuple[dict, str | None]:
    """Root minSubGroup, subgroups and this pod's leaf subgroup for a JobSet."""
    spec = jobset.get("spec") if isinstance(jobset.get("spec"), Mapping) else {}
    rjobs = [r for r in items(spec.get("replicatedJobs")) if isinstance(r, Mapping) and isinstance(r.get("name"), str)]
    subgroups: list[dict] = []
    for rjob in rjobs:
        name = str(rjob["name"])
        replicas = max(_int(rjob.get("replicas", 1), 1), 1)
        template = rjob.get("template") if isinstance(rjob.get("template"), Mapping) else {}
        tspec = template.get("spec") if isinstance(template.get("spec"), Mapping) else {}
        leaf_min = _int(_str_map(mapping(template, "metadata").get("annotations")).get(BATCH_MIN_MEMBER),
                        max(_int(tspec.get("parallelism", 1), 1), 1))
        subgroups.append({"name": name, "minSubGroup": replicas})
        for index in range(replicas):
            subgroups.append({"name": f"{name}-{index}", "parent": name, "minMember": leaf_min})
    startup = spec.get("startupPolicy") if isinstance(spec.get("startupPolicy"), Mapping) else {}
    default_min = 1 if startup.get("startupPolicyOrder") == "InOrder" else max(len(rjobs), 1)
    root_min = _int(_str_map(mapping(jobset, "metadata").get("annotations")).get(BATCH_MIN_MEMBER), default_min)
    labels = _str_map(mapping(pod, "metadata").get("labels"))
    rjob_name = labels.get("jobset.sigs.k8s.io/replicatedjob-name")
    index = labels.get("jobset.sigs.k8s.io/job-index")
    if (rjob_name is None or index is None) and chain and chain[0].get("kind") == "Job":
        job_name = str(mapping(chain[0], "metadata").get("name") or "")
        prefix = f"{mapping(jobset, 'metadata').get('name')}-"
        for rjob in rjobs:
            head = f"{prefix}{rjob['name']}-"
            if job_name.startswith(head) and job_name[len(head):].isdigit():
                rjob_name, index = str(rjob["name"]), job_name[len(head):]
    leaf = f"{rjob_name}-{index}" if rjob_name is not None and index is not None else None
    return {"minSubGroup": root_min, "subGroups": subgroups}, leaf


def bare_podgroup_name(pod: Mapping) -> str:
    """The PodGroup name of a pod grouped alone (a bare pod, a Deployment's pod): `pg-<pod>-<podUID>`."""
    return f"pg-{mapping(pod, 'metadata').get('name') or ''}-{object_uid(pod)}"


def group_pod(pod: Mapping, owners: OwnerIndex, priority_classes: Collection[str]) -> Grouping:
    """The PodGroup (manifest) that `pod` belongs to under KAI's podgrouper rules."""
    pmeta = mapping(pod, "metadata")
    namespace = str(pmeta.get("namespace") or "default")
    chain = owner_chain(pod, owners)
    top, kept = _top_owner(chain)
    kind = str(top.get("kind")) if top is not None else "Pod"
    owners_top_down = list(reversed(kept))
    label_sources = [*owners_top_down, pod]

    spec: dict = {"minMember": 1}
    subgroup: str | None = None
    if top is None or kind in PER_POD_KINDS:
        name = bare_podgroup_name(pod)
    else:
        tmeta = mapping(top, "metadata")
        name = f"pg-{tmeta.get('name')}-{object_uid(top, namespace)}"
        tspec = top.get("spec") if isinstance(top.get("spec"), Mapping) else {}
        tannotations = _str_map(tmeta.get("annotations"))
        if kind == "Job":
            spec["minMember"] = max(_int(tannotations.get(BATCH_MIN_MEMBER), 1), 0)
        elif kind in KUBEFLOW_SPECS:
            run_policy = tspec.get("runPolicy") if isinstance(tspec.get("runPolicy"), Mapping) else {}
            policy = run_policy.get("schedulingPolicy") or tspec.get("schedulingPolicy") or {}
            minimum = policy.get("minAvailable") if isinstance(policy, Mapping) else None
            spec["minMember"] = _int(minimum, 0) or _replica_total(tspec, KUBEFLOW_SPECS[kind])
        elif kind in ("RayCluster", "RayJob", "RayService"):
            spec["minMember"] = _ray_min(tspec)
        elif kind == "LeaderWorkerSet":
            template = tspec.get("leaderWorkerTemplate") or {}
            spec["minMember"] = max(_int(template.get("size", 1) if isinstance(template, Mapping) else 1, 1), 1)
            index = _str_map(pmeta.get("labels")).get("leaderworkerset.sigs.k8s.io/group-index", "0")
            name = f"{name}-{index}"
        elif kind == "JobSet":
            del spec["minMember"]
            layout, subgroup = _jobset_layout(top, pod, kept)
            spec.update(layout)

    queue = _first_label(label_sources, QUEUE_LABELS) or DEFAULT_QUEUE
    spec["queue"] = queue
    spec["priorityClassName"] = _priority_class(owners_top_down, pod, kind, priority_classes)
    preemptibility = _first_label(label_sources, (PREEMPTIBILITY_LABEL,))
    if preemptibility in ("preemptible", "non-preemptible", "semi-preemptible"):
        spec["preemptibility"] = preemptibility

    source = top if top is not None else pod
    smeta = mapping(source, "metadata")
    annotations = _str_map(smeta.get("annotations"))
    annotations.pop(POD_GROUP_ANNOTATION, None)  # a bare pod's: the pod's membership, not the PodGroup's metadata
    if annotations.get(TOPOLOGY_ANNOTATION):
        constraint = {"topology": annotations[TOPOLOGY_ANNOTATION]}
        if annotations.get(TOPOLOGY_REQUIRED):
            constraint["requiredTopologyLevel"] = annotations[TOPOLOGY_REQUIRED]
        if annotations.get(TOPOLOGY_PREFERRED):
            constraint["preferredTopologyLevel"] = annotations[TOPOLOGY_PREFERRED]
        spec["topologyConstraint"] = constraint

    labels = _str_map(smeta.get("labels"))
    pool = _first_label(label_sources, (NODE_POOL_LABEL,))
    if pool:
        labels[NODE_POOL_LABEL] = pool
    metadata: dict = {"name": name, "namespace": namespace}
    created = smeta.get("creationTimestamp") or pmeta.get("creationTimestamp")
    if kind in PER_POD_KINDS:  # one group per pod: it is as old as its pod
        created = pmeta.get("creationTimestamp") or created
    if created:
        metadata["creationTimestamp"] = created
    if labels:
        metadata["labels"] = labels
    if top is not None:
        annotations[TOP_OWNER_METADATA] = json.dumps(
            {"name": str(smeta.get("name") or ""), "uid": object_uid(top, namespace), "kind": kind,
             "apiVersion": str(top.get("apiVersion") or "")}, sort_keys=True, separators=(",", ":"))
    if annotations:
        metadata["annotations"] = annotations
    manifest = {"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": metadata, "spec": spec}
    return Grouping(podgroup=manifest, subgroup=subgroup)


def _priority_class(owners_top_down: list[Mapping], pod: Mapping, kind: str,
                    priority_classes: Collection[str]) -> str:
    from_owner = _first_label(owners_top_down, ("priorityClassName",))
    if from_owner:
        return from_owner
    from_pod = _first_label([pod], ("priorityClassName",))
    if from_pod:
        return from_pod
    pod_spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    named = pod_spec.get("priorityClassName")
    if named and str(named) in priority_classes:
        return str(named)
    return KIND_PRIORITY.get(kind, DEFAULT_PRIORITY_CLASS)

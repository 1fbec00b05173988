"""Pure pieces of the podgrouper service (no I/O): which API serves an owner, which pods are left alone,
the PodGroup to create (the rules themselves are `shoal.core.ingest.grouping`), the patches that bring an existing
PodGroup and the pod in line, and the warning event.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from shoal.adapters.kube import Resource
from shoal.core.ingest import grouping as rules
from shoal.core.model import ANNOTATION_LAST_START

SKIP_PODGROUPER = rules.SKIP_PODGROUPER
SKIPPED_UNNAMED = "skip-podgrouper without pod-group-name"
MANAGED_SPEC = ("minMember", "minSubGroup", "subGroups", "queue", "priorityClassName", "preemptibility",
                "topologyConstraint")
COMPONENT = "shoal-podgrouper"
WARNING_REASON = "PodGrouperWarning"
# owner kinds whose plural is not `<kind lower>s`
IRREGULAR_PLURALS: dict[str, str] = {}


def _map(value: object) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def meta(obj: Mapping) -> Mapping:
    return _map(obj.get("metadata"))


def pod_key(pod: Mapping) -> str:
    m = meta(pod)
    return f"{m.get('namespace') or 'default'}/{m.get('name') or ''}"


def owner_resource(ref: Mapping) -> Resource | None:
    """The namespaced resource that serves an ownerReference's kind, or None for a malformed ref."""
    api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
    if not api_version or not kind or not ref.get("name"):
        return None
    group, _, version = api_version.rpartition("/")
    plural = IRREGULAR_PLURALS.get(kind, kind.lower() + "s")
    return Resource(group, version, plural, kind)


def skip_reason(pod: Mapping, owners: Iterable[Mapping] = ()) -> str | None:
    """Why the podgrouper leaves this pod alone, or None.

    - a pod that is being deleted or has finished;
    - `kai.scheduler/skip-podgrouper: "true"` on the pod or an owner (KAI: the pod or any owner's annotation):
      an external PodGroup, made by Grove's KAI backend or a user; without `pod-group-name` the pod can never
      be scheduled, which the caller reports (`SKIPPED_UNNAMED`);
    - a bare pod that already names its PodGroup (as KAI: an orphan pod with a PodGroup is left alone), unless
      the name is the podgrouper's own for it (its binding carried it before the podgrouper was done).
    """
    m = meta(pod)
    if m.get("deletionTimestamp"):
        return "deleting"
    if str(_map(pod.get("status")).get("phase") or "") in ("Succeeded", "Failed"):
        return "finished"
    named = _map(m.get("annotations")).get(rules.POD_GROUP_ANNOTATION)
    if rules.skips_podgrouper(pod, owners):
        return "skip-podgrouper" if named else SKIPPED_UNNAMED
    if named and rules.controller_ref(pod) is None and named != rules.bare_podgroup_name(pod):
        return "bare pod with pod-group-name"
    return None


def skipped_unnamed_message(pod: Mapping) -> str:
    return (f"pod {pod_key(pod)} has {SKIP_PODGROUPER}: \"true\" (on the pod or an owner) but no "
            f"{rules.POD_GROUP_ANNOTATION} annotation: no PodGroup is made for it, so it is not scheduled until "
            f"it names the PodGroup made for it")


def top_owner_ref(grouping: rules.Grouping, pod: Mapping) -> dict:
    """The ownerReference for the PodGroup: the top owner, or the pod itself for per-pod groups and bare pods."""
    spec_kind = ""
    annotations = _map(meta(grouping.podgroup).get("annotations"))
    raw = annotations.get(rules.TOP_OWNER_METADATA)
    top: Mapping = {}
    if raw:
        try:
            top = _map(json.loads(raw))
        except ValueError:
            top = {}
        spec_kind = str(top.get("kind") or "")
    if top and spec_kind not in rules.PER_POD_KINDS and top.get("uid") and top.get("apiVersion"):
        return {"apiVersion": str(top["apiVersion"]), "kind": spec_kind, "name": str(top.get("name") or ""),
                "uid": str(top["uid"])}
    m = meta(pod)
    return {"apiVersion": "v1", "kind": "Pod", "name": str(m.get("name") or ""), "uid": str(m.get("uid") or "")}


def desired_podgroup(grouping: rules.Grouping, pod: Mapping) -> dict:
    """The PodGroup to create: the rules' manifest, owned by its top owner (garbage-collected with it)."""
    manifest = json.loads(json.dumps(grouping.podgroup))
    metadata = manifest["metadata"]
    metadata.pop("creationTimestamp", None)
    metadata["ownerReferences"] = [top_owner_ref(grouping, pod)]
    return manifest


def podgroup_patch(existing: Mapping, desired: Mapping, started: str | None = None) -> dict | None:
    """A merge patch bringing `existing` to `desired` on the fields the podgrouper owns; None if in line.
    Labels and annotations are only added or updated (the scheduler writes its own annotations). `started`
    (a pod of it is bound) is added as the start stamp to a PodGroup that has none; one it has is kept."""
    if not has_start_stamp(existing):
        desired = with_start_stamp(dict(desired), started)
    patch: dict = {}
    have_spec, want_spec = _map(existing.get("spec")), _map(desired.get("spec"))
    spec = {key: want_spec.get(key) for key in MANAGED_SPEC if have_spec.get(key) != want_spec.get(key)}
    if spec:
        patch["spec"] = spec
    metadata: dict = {}
    for section in ("labels", "annotations"):
        have, want = _map(meta(existing).get(section)), _map(meta(desired).get(section))
        changed = {k: v for k, v in want.items() if have.get(k) != v}
        if changed:
            metadata[section] = changed
    refs = [r for r in meta(existing).get("ownerReferences") or [] if isinstance(r, Mapping)]
    wanted_refs = list(meta(desired).get("ownerReferences") or [])
    if wanted_refs and not any(r.get("uid") == wanted_refs[0].get("uid") for r in refs):
        metadata["ownerReferences"] = [*refs, *wanted_refs]
    if metadata:
        patch["metadata"] = metadata
    return patch or None


def pod_patch(pod: Mapping, grouping: rules.Grouping) -> dict | None:
    """The pod's annotation/label patch, or None when the pod already carries them."""
    wanted = grouping.pod_patch()["metadata"]
    m = meta(pod)
    out: dict = {}
    for section, values in wanted.items():
        have = _map(m.get(section))
        changed = {k: v for k, v in values.items() if have.get(k) != v}
        if changed:
            out[section] = changed
    return {"metadata": out} if out else None


def input_warnings(owners: Iterable[Mapping]) -> list[str]:
    """Problems in owners' podgrouper annotations that the rules silently replace with defaults."""
    found = []
    for owner in owners:
        raw = _map(meta(owner).get("annotations")).get(rules.BATCH_MIN_MEMBER)
        if raw is not None and not str(raw).strip().isdigit():
            found.append(f"{owner.get('kind')} {meta(owner).get('name')}: {rules.BATCH_MIN_MEMBER} {raw!r} is "
                         f"not a non-negative integer; the default is used")
    return found


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def warning_event(pod: Mapping, message: str, *, now: str | None = None) -> dict:
    """A core/v1 Warning event `PodGrouperWarning` on the pod (as KAI's podgrouper emits)."""
    now = now or utc_now()
    m = meta(pod)
    namespace, name = str(m.get("namespace") or "default"), str(m.get("name") or "")
    digest = hashlib.sha256(f"{namespace}/{name}/{message}/{now}".encode()).hexdigest()[:10]
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name[:200]}.{digest}", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": namespace,
                               "uid": str(m.get("uid") or "")},
            "reason": WARNING_REASON, "message": message[:1024], "type": "Warning",
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT, "firstTimestamp": now, "lastTimestamp": now, "count": 1}


def start_stamp(pod: Mapping) -> str | None:
    """When a bound pod started, as the PodGroup's start stamp (kai.scheduler/last-start-timestamp, RFC 3339
    to the second): its PodScheduled condition's transition, else now; None for a pod not bound."""
    if not _map(pod.get("spec")).get("nodeName"):
        return None
    for condition in _map(pod.get("status")).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled" \
                and condition.get("status") == "True" and condition.get("lastTransitionTime"):
            return str(condition["lastTransitionTime"])
    return utc_now()


def scheduling_declined(pod: Mapping) -> bool:
    """The pod's PodScheduled condition is False: the scheduler found no place for it now (Unschedulable), or
    a scheduling gate holds it (SchedulingGated); either way its bind is not on its way."""
    return any(isinstance(c, Mapping) and c.get("type") == "PodScheduled" and c.get("status") == "False"
               for c in _map(pod.get("status")).get("conditions") or [])


def has_start_stamp(podgroup: Mapping) -> bool:
    return bool(_map(meta(podgroup).get("annotations")).get(ANNOTATION_LAST_START))


def with_start_stamp(podgroup: dict, started: str | None) -> dict:
    """The PodGroup to create, carrying `started` as its start stamp (unchanged when None)."""
    if started is None:
        return podgroup
    metadata = dict(podgroup["metadata"])
    metadata["annotations"] = {**_map(metadata.get("annotations")), ANNOTATION_LAST_START: started}
    return {**podgroup, "metadata": metadata}

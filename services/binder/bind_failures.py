"""The binder's side of the bind back-off (shoal.core.bindbackoff): a failed bind round counted on the PodGroup.

One count per plan and PodGroup (a gang whose binds all fail in one plan counts once), written before the pod's
in-flight lease is removed, so the planner never plans the pod again without seeing the failure. A PodGroup that
cannot be read or patched is logged and left as it is (the bind failure itself is still reported).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.binder import kubeobjects as ko
from shoal.adapters import kube as k
from shoal.errors import NotFoundError, ShoalError
from shoal.logging import get_logger

log = get_logger("shoal.binder")


@dataclass
class BindFailures:
    kube: k.Kube
    _counted: dict[str, set[str]] = field(default_factory=dict)  # plan id → PodGroups counted for it

    async def count(self, plan_id: str, pod_group: str, error: str) -> int | None:
        """The PodGroup's new failure count, or None when not counted (already counted for this plan, no group,
        or the PodGroup could not be read or written)."""
        counted = self._counted.setdefault(plan_id, set())
        if not pod_group or pod_group in counted:
            return None
        counted.add(pod_group)
        namespace, name = ko.split(pod_group)
        try:
            current = await self.kube.get(k.PODGROUPS, name, namespace=namespace or None)
            failures, patch = ko.bind_failure_patch(current, error, ko.utc_now())
            await self.kube.patch(k.PODGROUPS, name, patch, namespace=namespace or None, answer=False)
        except NotFoundError:
            return None
        except ShoalError as exc:
            log.warning("bind_failure_not_counted", pod_group=pod_group, error=str(exc))
            return None
        log.info("bind_backoff_counted", pod_group=pod_group, failures=failures)
        return failures

    def forget(self, plan_id: str) -> None:
        self._counted.pop(plan_id, None)

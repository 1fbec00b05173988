"""The podgrouper's settings (`SHOAL_*` environment variables; `shoal-podgrouper --help` lists them).

Apart from `app.py` so that `--help` imports no client library (the Kubernetes client binds a socket at
import).
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from msgspec import Meta

from shoal.settings import ServiceSettings, doc


class PodGrouperSettings(ServiceSettings, frozen=True, kw_only=True):
    env_aliases: ClassVar[dict[str, str]] = {"scheduler_names": "SHOAL_SCHEDULER_NAME"}  # as shoal-config sets

    scheduler_names: Annotated[tuple[str, ...], doc("pods with one of these schedulerNames get PodGroups (one "
                                                    "watch per name)")] = ("shoal-scheduler",)
    workers: Annotated[int, Meta(ge=1, le=64), doc("pods grouped concurrently")] = 16
    retry_max_s: Annotated[float, Meta(gt=0), doc("backoff cap for owners that cannot be read")] = 30.0
    bare_annotate_delay_s: Annotated[float, Meta(ge=0, le=300), doc(
        "the most seconds a pending bare pod's PodGroup and pod-group-name annotation wait for its bind (its "
        "Binding carries the annotation; the PodGroup is then created with the start stamp); a PodScheduled=False "
        "condition on the pod (unschedulable, gated) ends the wait at once; 0: both at once")] = 30.0

    def problems(self) -> list[str]:
        return [] if self.scheduler_names else ["SHOAL_SCHEDULER_NAMES: at least one scheduler name"]

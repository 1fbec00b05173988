"""What the fake kubelet reads from a pod (PodView) and the status it writes: Running, then Succeeded/Failed."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any


@dataclass
class PodView:
    """The parts of a pod the fake kubelet acts on."""

    uid: str
    namespace: str
    name: str
    node: str
    phase: str
    deleting: bool
    grace_s: float
    annotations: dict[str, str]
    containers: list[tuple[str, str]]
    start_time: str | None

    @classmethod
    def of(cls, pod: dict[str, Any]) -> PodView:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}  # null right after create
        return cls(
            uid=meta["uid"],
            namespace=meta["namespace"],
            name=meta["name"],
            node=spec.get("nodeName", ""),
            phase=status.get("phase") or "Pending",
            deleting=bool(meta.get("deletionTimestamp")),
            grace_s=float(meta.get("deletionGracePeriodSeconds") or 0),
            annotations=meta.get("annotations") or {},
            containers=[(c["name"], c.get("image", "")) for c in spec.get("containers") or []],
            start_time=status.get("startTime"),
        )


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def running_status(pod: PodView, pod_ip: str) -> dict[str, Any]:
    now = _now()
    conds = ["PodScheduled", "Initialized", "PodReadyToStartContainers", "ContainersReady", "Ready"]
    return {
        "phase": "Running",
        "startTime": now,
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "conditions": [{"type": c, "status": "True", "lastTransitionTime": now} for c in conds],
        "containerStatuses": [
            {
                "name": name,
                "image": image or "fake",
                "imageID": f"fake://{image or 'fake'}",
                "containerID": f"fake://{pod.uid}-{name}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for name, image in pod.containers
        ],
    }


def finished_status(pod: PodView, exit_code: int) -> dict[str, Any]:
    now = _now()
    reason = "Completed" if exit_code == 0 else "Error"
    started = pod.start_time or now
    return {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
            {"type": "Initialized", "status": "True", "lastTransitionTime": started},
            {"type": "PodReadyToStartContainers", "status": "False", "lastTransitionTime": now},
            {
                "type": "ContainersReady",
                "status": "False",
                "reason": "PodCompleted",
                "lastTransitionTime": now,
            },
            {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
        ],
        "containerStatuses": [
            {
                "name": name,
                "image": image or "fake",
                "imageID": f"fake://{image or 'fake'}",
                "containerID": f"fake://{pod.uid}-{name}",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": reason,
                        "startedAt": started,
                        "finishedAt": now,
                    }
                },
            }
            for name, image in pod.containers
        ],
    }

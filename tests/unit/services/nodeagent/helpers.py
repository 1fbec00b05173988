"""Small builders for node agent unit tests."""

from fractions import Fraction

from services.nodeagent.shares import ShareSpec
from services.nodeagent.translate import PodView


def pod(name, annotations=None, labels=None, uid=None, created="2026-01-01T00:00:00Z", priority=0, ns="ns"):
    return PodView(
        uid=uid or f"uid-{name}",
        namespace=ns,
        name=name,
        node_name="n1",
        phase="Running",
        created=created,
        labels=labels or {},
        annotations=annotations or {},
        priority=priority,
    )


def share(name, request, limit=None, priority=0, created="2026-01-01T00:00:00Z", fraction=None, limit_fraction=None):
    return ShareSpec(
        pod_uid=f"uid-{name}",
        pod_key=f"ns/{name}",
        mem_request_mib=request,
        mem_limit_mib=limit if limit is not None else request,
        compute_request=Fraction(fraction) if fraction is not None else Fraction(0),
        compute_limit=Fraction(limit_fraction) if limit_fraction is not None else Fraction(1),
        priority=priority,
        created=created,
        fraction=Fraction(fraction) if fraction is not None else None,
    )

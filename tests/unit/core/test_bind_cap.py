"""The bind cap (`run_cycle_timed(bind_cap=…)`, the planner's SHOAL_BIND_CAP): a cycle places no further job
once it has placed that many pods (a gang never below its minimum), and then ends before the eviction actions."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_properties_allocate import clusters as allocate_clusters
from test_properties_evictions import apply
from test_properties_evictions import clusters as eviction_clusters

from shoal.core.cycle import run_cycle, run_cycle_timed
from shoal.core.model import make_snapshot
from shoal.core.plan import Bind, Evict, Pipeline, Plan


def _check_capped_cycle(snap, cap: int) -> tuple[bool, Plan]:
    """The capped cycle's plan, checked against the uncapped one; and whether the cap stopped it."""
    uncapped = run_cycle(snap)
    plan, timings = run_cycle_timed(snap, bind_cap=cap)
    capped = bool(timings.counters.get("allocate.capped"))
    event("capped" if capped else "not capped")
    binds = plan.of(Bind)
    if not capped:  # the cap never stopped allocate: the very same cycle
        assert plan.plan_id == uncapped.plan_id
        return False, plan
    # allocate stopped: what it placed (bound, or pipelined onto releasing room) is what the uncapped cycle
    # placed first, in the same order
    placements = [op for op in plan.ops if isinstance(op, Bind | Pipeline)]
    assert placements == [op for op in uncapped.ops if isinstance(op, Bind | Pipeline)][: len(placements)]
    assert len(binds) >= cap
    bound_jobs = [b.pod_group.split("/")[-1] for b in binds]
    sizes = Counter(p.pod_group for p in snap.pods)
    assert len(binds) - cap < sizes[bound_jobs[-1]]  # only the last job's own pods go past the cap
    # a gang is never cut below its minimum: each job placed with at least min_member running or bound
    running = Counter(p.pod_group for p in snap.pods if p.node_name is not None and not p.deleting)
    running.update(bound_jobs)
    minimum = {g.name: g.min_member for g in snap.pod_groups}
    for job in set(bound_jobs):
        assert running[job] >= minimum[job], job
    # and nothing of the actions after allocate: no job allocate never tried gets evictions for it
    assert not plan.of(Evict)
    return True, plan


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(allocate_clusters(), st.integers(1, 4))
def test_a_capped_cycle_places_what_the_uncapped_cycle_places_first(spec, cap):
    _check_capped_cycle(make_snapshot(**spec), cap)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(eviction_clusters(), st.integers(1, 3))
def test_capped_cycles_in_a_row_end_in_an_uncapped_one_and_never_evict_for_untried_jobs(spec, cap):
    """As the planner runs them: each capped plan applied (its binds running), the next cycle goes on; the
    run ends with a cycle the cap did not stop, which may then evict (reclaim, preempt) as a full one does."""
    snap = make_snapshot(**spec)
    pending = sum(1 for p in snap.pods if p.node_name is None)
    for _ in range(pending + 1):
        capped, plan = _check_capped_cycle(snap, cap)
        if not capped:
            break
        snap = apply(snap, plan)
    else:
        raise AssertionError("capped cycles never ended")

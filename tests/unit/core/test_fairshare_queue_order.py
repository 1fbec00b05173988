"""DRF dominant share (§3.3), queue-order rules (§4.1), record_allocation and the queue tree."""

from fractions import Fraction

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from shoal.core.fairshare import QueueShare
from shoal.core.queue_order import (
    EQUAL,
    LEFT_FIRST,
    RIGHT_FIRST,
    compare_queues,
    dominant_share,
    dominant_share_with_job,
    has_smaller_allocatable,
    is_over_utilised,
    is_within_deserved,
    queue_path,
    record_allocation,
    uses_zero_allocatable,
)
from shoal.core.queue_tree import DUPLICATE_QUEUE, MISSING_PARENT, PARENT_CYCLE, build_tree, tree_from_parents
from shoal.core.resources import UNLIMITED, ZERO, Resources

GPU = 1000
TOTAL = Resources(cpu_milli=10_000, memory_bytes=10**10, gpu_milli=8 * GPU)


def gpus(n):
    return Resources(gpu_milli=int(n * GPU))


def share(
    name="q",
    *,
    quota=ZERO,
    fair=ZERO,
    allocated=ZERO,
    allocatable=None,
    priority=100,
    creation="",
    parent=None,
):
    return QueueShare(
        name=name,
        parent=parent,
        children=(),
        priority=priority,
        creation_key=creation,
        display_name="",
        quota=quota,
        deserved=quota,
        fair_share=fair,
        allocated=allocated,
        allocated_non_preemptible=ZERO,
        request=allocated,
        limit=Resources(cpu_milli=UNLIMITED, memory_bytes=UNLIMITED, gpu_milli=UNLIMITED),
        allocatable=allocatable if allocatable is not None else TOTAL,
    )


def test_dominant_share_is_max_ratio_over_resources():
    q = share(allocated=Resources(cpu_milli=5000, gpu_milli=2 * GPU), allocatable=TOTAL)
    assert dominant_share(q, TOTAL) == Fraction(1, 2)  # cpu 5000/10000 beats gpu 2/8


def test_dominant_share_unlimited_allocatable_uses_cluster_total_and_zero_is_penalised():
    unlimited = Resources(cpu_milli=UNLIMITED, memory_bytes=UNLIMITED, gpu_milli=UNLIMITED)
    q = share(allocated=gpus(2), allocatable=unlimited)
    assert dominant_share(q, TOTAL) == Fraction(1, 4)
    zero = share(allocated=gpus(2), allocatable=ZERO)
    assert dominant_share(zero, TOTAL) == 2 * 1000  # KAI: allocated GPUs x 1000
    cpu_zero = share(allocated=Resources(cpu_milli=100), allocatable=ZERO)
    assert dominant_share(cpu_zero, TOTAL) == 100 * 1000  # millicores x 1000
    assert dominant_share(share(allocatable=ZERO), TOTAL) == 0


def test_dominant_share_with_job_and_victims():
    q = share(allocated=gpus(4), allocatable=TOTAL)
    assert dominant_share_with_job(q, TOTAL, gpus(2)) == Fraction(6, 8)
    assert dominant_share_with_job(q, TOTAL, gpus(2), victims=gpus(3)) == Fraction(3, 8)


def test_over_utilised_needs_every_resource_over_fair_share():
    q = share(fair=Resources(cpu_milli=1, memory_bytes=1, gpu_milli=1), allocated=Resources(2, 2, 2))
    assert is_over_utilised(q)
    assert not is_over_utilised(share(fair=ZERO, allocated=gpus(3)))  # cpu 0 < 0 is false


def test_within_deserved_treats_unlimited_quota_as_infinite():
    quota = Resources(cpu_milli=UNLIMITED, memory_bytes=UNLIMITED, gpu_milli=2 * GPU)
    q = share(quota=quota, allocated=Resources(cpu_milli=10**6, gpu_milli=GPU))
    assert is_within_deserved(q, gpus(1))
    assert not is_within_deserved(q, gpus(2))


def test_zero_allocatable_penalty_and_smaller_allocatable():
    q = share(allocatable=Resources(cpu_milli=5, memory_bytes=5, gpu_milli=0))
    assert uses_zero_allocatable(q, gpus(1))
    assert not uses_zero_allocatable(q, Resources(cpu_milli=1))
    small = share(allocatable=Resources(1, 1, 1))
    big = share(allocatable=Resources(1, 1, UNLIMITED))
    assert has_smaller_allocatable(small, big)
    assert not has_smaller_allocatable(big, small)
    assert not has_smaller_allocatable(small, small)


def test_compare_rules_in_order():
    job = gpus(1)
    # rule 1: the over-utilised queue goes last
    over = share("a", fair=Resources(0, 0, 0), allocated=Resources(1, 1, 1))
    under = share("b")
    assert compare_queues(over, under, job, job, TOTAL) == RIGHT_FIRST
    # rule 2: within deserved beats over deserved, even against priority
    starved = share("a", quota=gpus(4), priority=1)
    greedy = share("b", quota=ZERO, priority=999)
    assert compare_queues(starved, greedy, job, job, TOTAL) == LEFT_FIRST
    # rule 3: priority
    assert compare_queues(share("a", priority=1), share("b", priority=2), job, job, TOTAL) == RIGHT_FIRST
    # rule 4: zero allocatable penalty
    zero = share("a", allocatable=ZERO)
    assert compare_queues(zero, share("b"), job, job, TOTAL) == RIGHT_FIRST
    # rule 5: smaller dominant share with the job
    assert compare_queues(share("a", allocated=gpus(3)), share("b", allocated=gpus(1)), job, job, TOTAL) == 1
    # rule 5 with victims removed
    assert (
        compare_queues(share("a", allocated=gpus(3)), share("b", allocated=gpus(1)), job, job, TOTAL, gpus(3))
        == -1
    )
    # rule 6: same share with the job (different job sizes), smaller share without it wins
    left = share("a", allocated=gpus(2))
    right = share("b", allocated=gpus(1))
    assert compare_queues(left, right, gpus(1), gpus(2), TOTAL) == RIGHT_FIRST
    # rule 7: smaller allocatable share
    weaker = share("a", allocatable=Resources(10_000, 10**10, 4 * GPU))
    assert compare_queues(weaker, share("b"), ZERO, ZERO, TOTAL) == LEFT_FIRST
    # rule 8: older first, then name
    assert compare_queues(share("a", creation="2"), share("b", creation="1"), job, job, TOTAL) == RIGHT_FIRST
    assert compare_queues(share("a"), share("b"), job, job, TOTAL) == LEFT_FIRST
    assert compare_queues(share("a"), share("a"), job, job, TOTAL) == EQUAL


sizes = st.integers(0, 8).map(gpus)


@given(sizes, sizes, sizes, sizes, st.integers(0, 3), st.integers(0, 3))
def test_compare_is_antisymmetric(a_alloc, b_alloc, a_job, b_job, a_prio, b_prio):
    a = share("a", allocated=a_alloc, quota=gpus(2), fair=gpus(3), priority=a_prio)
    b = share("b", allocated=b_alloc, quota=gpus(2), fair=gpus(3), priority=b_prio)
    assert compare_queues(a, b, a_job, b_job, TOTAL) == -compare_queues(b, a, b_job, a_job, TOTAL) != EQUAL


def test_record_allocation_updates_leaf_and_ancestors():
    shares = {
        "root": share("root"),
        "p": share("p", parent="root"),
        "c": share("c", parent="p"),
        "other": share("other", parent="root"),
    }
    record_allocation(shares, "c", gpus(2), non_preemptible=True)
    record_allocation(shares, "c", gpus(1), non_preemptible=False)
    assert [shares[n].allocated for n in ("c", "p", "root")] == [gpus(3)] * 3
    assert [shares[n].allocated_non_preemptible for n in ("c", "p", "root")] == [gpus(2)] * 3
    assert shares["other"].allocated == ZERO
    record_allocation(shares, "c", -gpus(3), non_preemptible=False)
    assert shares["root"].allocated == ZERO
    assert [s.name for s in queue_path(shares, "c")] == ["c", "p", "root"]
    assert queue_path(shares, "missing") == ()


def test_queue_path_survives_a_cycle_in_hand_made_shares():
    shares = {"a": share("a", parent="b"), "b": msgspec.structs.replace(share("b"), parent="a")}
    assert len(queue_path(shares, "a")) <= 3


def test_tree_orphans_cycles_duplicates_and_leaves():
    tree = build_tree(
        [
            ("root", None),
            ("a", "root"),
            ("a1", "a"),
            ("b", ""),
            ("self", "self"),
            ("o", "gone"),
            ("o1", "o"),
            ("x", "y"),
            ("y", "z"),
            ("z", "x"),
            ("tail", "x"),
            ("a", "b"),
        ]
    )
    assert tree.parents == {"a": "root", "a1": "a", "b": None, "root": None}
    assert tree.top_level() == ("b", "root")
    assert tree.leaves() == ("a1", "b")
    assert tree.is_leaf("a1") and not tree.is_leaf("a") and not tree.is_leaf("missing")
    assert tree.ancestors("a1") == ("a", "root")
    assert tree.path("a1") == ("a1", "a", "root")
    assert tree.top_down() == ("b", "root", "a", "a1")
    reasons = {d.name: d.reason for d in tree.dropped}
    assert reasons == {
        "a": DUPLICATE_QUEUE,
        "o": MISSING_PARENT,
        "o1": MISSING_PARENT,
        "self": PARENT_CYCLE,
        "tail": PARENT_CYCLE,
        "x": PARENT_CYCLE,
        "y": PARENT_CYCLE,
        "z": PARENT_CYCLE,
    }
    messages = {d.name: d.message for d in tree.dropped}
    assert messages["o"] == "Queue 'o' has missing parent 'gone'"
    assert messages["o1"] == "Ancestor of queue 'o1' was dropped: Queue 'o' has missing parent 'gone'"


@given(
    st.dictionaries(st.sampled_from("abcdefg"), st.one_of(st.none(), st.sampled_from("abcdefgh")), max_size=7)
)
def test_tree_never_crashes_and_keeps_exactly_the_rooted_queues(parents):
    tree = tree_from_parents(parents)

    def rooted(name, seen=()):
        parent = parents[name]
        if parent is None:
            return True
        if parent not in parents or parent in seen:
            return False
        return rooted(parent, (*seen, name))

    assert set(tree.parents) == {n for n in parents if rooted(n)}
    assert set(tree.parents) | {d.name for d in tree.dropped} == set(parents)
    assert sorted(tree.top_down()) == sorted(tree.parents)

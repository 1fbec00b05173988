"""Fair-share division: KAI's worked examples (§3.2, §3.5, S14-S17, S38), hierarchy and properties."""

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.core.fairshare import (
    QueueInput,
    ShareResource,
    ShareUsage,
    allocatable_amount,
    divide_fair_share,
    effective_limit,
)
from shoal.core.fairshare_division import Claim, divide_resource
from shoal.core.resources import UNLIMITED, ZERO, Resources

GPU = 1000
OPEN = ShareResource(quota=UNLIMITED, limit=UNLIMITED, over_quota_weight=1)  # the scenarios' default
LOTS = Resources(gpu_milli=1000 * GPU)


def gpu_queue(name, quota=0, limit=UNLIMITED, weight=1, priority=100, request=LOTS, parent=None, **kw):
    return QueueInput(
        name=name,
        parent=parent,
        priority=priority,
        cpu=OPEN,
        memory=OPEN,
        gpu=ShareResource(quota=quota, limit=limit, over_quota_weight=weight),
        request=request,
        **kw,
    )


def fair_gpus(result):
    return {name: share.fair_share.gpu_milli // GPU for name, share in result.queues.items()}


def test_weights_2_to_1_give_7_and_3():  # §3.2 worked example, S14
    result = divide_fair_share(
        [gpu_queue("A", weight=2), gpu_queue("B", weight=1)], Resources(gpu_milli=10 * GPU)
    )
    assert fair_gpus(result) == {"A": 7, "B": 3}


def test_priority_buckets_beat_weight():  # S15
    queues = [gpu_queue("A", priority=200, weight=1), gpu_queue("B", priority=100, weight=100)]
    assert fair_gpus(divide_fair_share(queues, Resources(gpu_milli=4 * GPU))) == {"A": 4, "B": 0}


def test_deserved_first_regardless_of_priority():  # S16
    queues = [gpu_queue("A", quota=2 * GPU, priority=50), gpu_queue("B", quota=2 * GPU, priority=200)]
    assert fair_gpus(divide_fair_share(queues, Resources(gpu_milli=8 * GPU))) == {"A": 2, "B": 6}


def test_time_based_fair_share_usage_weights():  # S38, §3.5
    queues = [gpu_queue("A", usage=ShareUsage(gpu=0.5)), gpu_queue("B", usage=ShareUsage(gpu=0.0))]
    total = Resources(gpu_milli=16 * GPU)
    assert fair_gpus(divide_fair_share(queues, total, k_value=1.0)) == {"A": 5, "B": 11}
    assert fair_gpus(divide_fair_share(queues, total, k_value=0.0)) == {"A": 8, "B": 8}
    assert fair_gpus(divide_fair_share(queues, total, k_value=-3.0)) == {"A": 8, "B": 8}  # <= 0 -> 0
    no_usage = [gpu_queue("A"), gpu_queue("B")]
    assert fair_gpus(divide_fair_share(no_usage, total)) == {"A": 8, "B": 8}


def test_half_k_value_and_float_weights_are_exact():
    # k=0.5: s_A = 0.5 + 0.5*(0.5-0.5) = 0.5, s_B = 0.5 + 0.5*0.5 = 0.75 -> 6.4 / 9.6 -> 6 + 9, spare to B
    queues = [gpu_queue("A", usage=ShareUsage(gpu=0.5)), gpu_queue("B")]
    assert fair_gpus(divide_fair_share(queues, Resources(gpu_milli=16 * GPU), k_value=0.5)) == {
        "A": 6,
        "B": 10,
    }
    floats = [gpu_queue("A", weight=0.2), gpu_queue("B", weight=0.1)]
    assert fair_gpus(divide_fair_share(floats, Resources(gpu_milli=10 * GPU))) == {"A": 7, "B": 3}
    thirds = [gpu_queue(n, weight=Fraction(1, 3)) for n in "ABC"]
    assert fair_gpus(divide_fair_share(thirds, Resources(gpu_milli=9 * GPU))) == {"A": 3, "B": 3, "C": 3}


def test_quota_unlimited_child_deserves_parents_amount():  # S17
    queues = [
        gpu_queue("root", quota=UNLIMITED),
        gpu_queue("p", parent="root", quota=4 * GPU, limit=4 * GPU),
        gpu_queue("c", parent="p", quota=UNLIMITED),
        gpu_queue("other", parent="root", quota=0),
    ]
    result = divide_fair_share(queues, Resources(gpu_milli=10 * GPU))
    p, c = result.queues["p"], result.queues["c"]
    assert p.fair_share.gpu_milli == 4 * GPU
    assert c.deserved.gpu_milli == 4 * GPU
    assert c.quota.gpu_milli == UNLIMITED
    assert c.fair_share.gpu_milli == 4 * GPU
    assert result.queues["other"].fair_share.gpu_milli == 6 * GPU


def test_leftover_units_go_by_remainder_then_creation_then_name():
    # 10 GPUs over three equal queues: 3 each, the spare GPU goes to the oldest queue.
    queues = [
        gpu_queue("a", creation_key="2024-01-03T00:00:00Z"),
        gpu_queue("b", creation_key="2024-01-01T00:00:00Z"),
        gpu_queue("c", creation_key="2024-01-02T00:00:00Z"),
    ]
    assert fair_gpus(divide_fair_share(queues, Resources(gpu_milli=10 * GPU))) == {"a": 3, "b": 4, "c": 3}
    same_age = [gpu_queue("z"), gpu_queue("y"), gpu_queue("x")]
    assert fair_gpus(divide_fair_share(same_age, Resources(gpu_milli=10 * GPU))) == {"x": 4, "y": 3, "z": 3}


def test_satisfied_queue_returns_its_unused_share():
    queues = [gpu_queue("A", request=Resources(gpu_milli=2 * GPU)), gpu_queue("B"), gpu_queue("C")]
    assert fair_gpus(divide_fair_share(queues, Resources(gpu_milli=12 * GPU))) == {"A": 2, "B": 5, "C": 5}


def test_zero_weight_gets_no_surplus_even_alone_in_its_priority_bucket():
    queues = [gpu_queue("A", weight=0), gpu_queue("B", weight=1)]
    assert fair_gpus(divide_fair_share(queues, Resources(gpu_milli=6 * GPU))) == {"A": 0, "B": 6}
    alone = [gpu_queue("A", weight=0, priority=200), gpu_queue("B")]
    assert fair_gpus(divide_fair_share(alone, Resources(gpu_milli=6 * GPU))) == {"A": 0, "B": 6}
    capped = [gpu_queue("A", priority=200, request=Resources(gpu_milli=2 * GPU)), gpu_queue("B")]
    assert fair_gpus(divide_fair_share(capped, Resources(gpu_milli=6 * GPU))) == {"A": 2, "B": 4}


def test_fractional_requests_and_whole_gpu_water_fill():
    queues = [
        gpu_queue("A", request=Resources(gpu_milli=2500)),
        gpu_queue("B", request=Resources(gpu_milli=2500)),
    ]
    result = divide_fair_share(queues, Resources(gpu_milli=4 * GPU))
    assert {n: s.fair_share.gpu_milli for n, s in result.queues.items()} == {"A": 2000, "B": 2000}
    result = divide_fair_share(queues, Resources(gpu_milli=6 * GPU))
    assert {n: s.fair_share.gpu_milli for n, s in result.queues.items()} == {"A": 2500, "B": 2500}


def test_leftover_unit_never_exceeds_what_the_queue_wants():
    # shares of 5 GPUs over three queues are 1.67 each: floors give 1 GPU, the leftovers one more GPU
    # each, but A only wants 1.9 GPUs, so it gets 0.9 and the rest goes to the next queue in line.
    queues = [gpu_queue("A", request=Resources(gpu_milli=1900)), gpu_queue("B"), gpu_queue("C")]
    result = divide_fair_share(queues, Resources(gpu_milli=5 * GPU))
    assert {n: s.fair_share.gpu_milli for n, s in result.queues.items()} == {"A": 1900, "B": 2000, "C": 1100}


def test_limits_cap_fair_share_and_omitted_limit_means_quota():
    queues = [
        gpu_queue("capped", quota=1 * GPU, limit=2 * GPU),
        gpu_queue("omitted", quota=3 * GPU, limit=None),
        gpu_queue("zero", quota=0, limit=0),
        gpu_queue("free", quota=0),
    ]
    result = divide_fair_share(queues, Resources(gpu_milli=20 * GPU))
    assert fair_gpus(result) == {"capped": 2, "omitted": 3, "zero": 0, "free": 15}
    assert result.queues["omitted"].limit.gpu_milli == 3 * GPU
    assert result.queues["zero"].limit.gpu_milli == 0
    assert result.queues["free"].limit.gpu_milli == UNLIMITED


def test_effective_limit_and_allocatable_rules():
    assert effective_limit(ShareResource(quota=2, limit=None)) == 2
    assert effective_limit(ShareResource(quota=UNLIMITED, limit=None)) == UNLIMITED
    assert effective_limit(ShareResource(quota=2, limit=0)) == 0
    assert effective_limit(ShareResource(quota=2, limit=-5)) == UNLIMITED
    assert allocatable_amount(UNLIMITED, 7, 3) == 3
    assert allocatable_amount(UNLIMITED, 7, UNLIMITED) == UNLIMITED
    assert allocatable_amount(2, 5, UNLIMITED) == 5
    assert allocatable_amount(6, 5, UNLIMITED) == 6
    assert allocatable_amount(2, 5, 4) == 4


def test_children_divide_parents_fair_share_and_roll_up():
    queues = [
        gpu_queue("dept-a", weight=1, request=ZERO),
        gpu_queue("dept-b", weight=1, request=ZERO),
        gpu_queue("a1", parent="dept-a", weight=3, allocated=Resources(gpu_milli=1 * GPU)),
        gpu_queue("a2", parent="dept-a", weight=1, allocated_non_preemptible=Resources(gpu_milli=GPU)),
        gpu_queue("b1", parent="dept-b", request=Resources(gpu_milli=2 * GPU)),
    ]
    result = divide_fair_share(queues, Resources(gpu_milli=10 * GPU))
    assert fair_gpus(result) == {"dept-a": 8, "dept-b": 2, "a1": 6, "a2": 2, "b1": 2}
    dept_a = result.queues["dept-a"]
    assert dept_a.request.gpu_milli == 2000 * GPU
    assert dept_a.allocated.gpu_milli == GPU
    assert dept_a.allocated_non_preemptible.gpu_milli == GPU
    assert dept_a.children == ("a1", "a2") and not dept_a.is_leaf
    assert result.queues["a1"].is_leaf and result.queues["a1"].parent == "dept-a"


def test_parent_limit_bounds_what_children_share():
    queues = [gpu_queue("p", limit=2 * GPU, request=ZERO), gpu_queue("c", parent="p")]
    assert fair_gpus(divide_fair_share(queues, Resources(gpu_milli=8 * GPU))) == {"p": 2, "c": 2}


def test_cpu_and_memory_divided_independently():
    mb = 10**6
    a = QueueInput(
        name="a",
        cpu=ShareResource(0, UNLIMITED, 1),
        memory=ShareResource(0, UNLIMITED, 1),
        gpu=ShareResource(0, UNLIMITED, 1),
        request=Resources(cpu_milli=10**6, memory_bytes=10**12),
    )
    b = a._replace(name="b", memory=ShareResource(0, UNLIMITED, 2))
    result = divide_fair_share([a, b], Resources(cpu_milli=1001, memory_bytes=10 * mb + 5))
    assert result.queues["a"].fair_share.cpu_milli + result.queues["b"].fair_share.cpu_milli == 1001
    assert {result.queues["a"].fair_share.cpu_milli, result.queues["b"].fair_share.cpu_milli} == {500, 501}
    # memory water-fills in whole megabytes: 10 MB split 1:2 -> 3 MB + 6 MB, then one leftover MB,
    # and the 5 bytes that are not a whole megabyte go as a partial leftover unit.
    mem = {n: s.fair_share.memory_bytes for n, s in result.queues.items()}
    assert sum(mem.values()) == 10 * mb + 5
    assert mem["b"] >= 6 * mb and mem["a"] >= 3 * mb


def test_orphans_and_cycles_are_dropped_not_fatal():
    queues = [
        gpu_queue("root"),
        gpu_queue("ok", parent="root"),
        gpu_queue("orphan", parent="missing"),
        gpu_queue("orphan-kid", parent="orphan"),
        gpu_queue("x", parent="y"),
        gpu_queue("y", parent="x"),
    ]
    result = divide_fair_share(queues, Resources(gpu_milli=4 * GPU))
    assert set(result.queues) == {"root", "ok"}
    assert {d.name: d.reason for d in result.dropped} == {
        "orphan": "MissingParent",
        "orphan-kid": "MissingParent",
        "x": "ParentCycle",
        "y": "ParentCycle",
    }
    assert fair_gpus(result) == {"root": 4, "ok": 4}


def test_division_of_one_resource_directly():
    claims = [
        Claim("A", "", 100, 0, UNLIMITED, 10**9, Fraction(2), Fraction(0)),
        Claim("B", "", 100, 0, UNLIMITED, 10**9, Fraction(1), Fraction(0)),
    ]
    assert divide_resource(10_000, claims, 1000, Fraction(1)) == {"A": 7000, "B": 3000}
    assert divide_resource(0, claims, 1000, Fraction(1)) == {"A": 0, "B": 0}
    assert divide_resource(-5, claims, 1000, Fraction(1)) == {"A": 0, "B": 0}


def test_oversubscribed_quotas_exceed_total():
    queues = [gpu_queue("A", quota=6 * GPU), gpu_queue("B", quota=6 * GPU)]
    assert fair_gpus(divide_fair_share(queues, Resources(gpu_milli=8 * GPU))) == {"A": 6, "B": 6}


def test_nonsense_weights_and_usage_do_not_crash():
    queues = [
        gpu_queue("A", weight=float("nan"), usage=ShareUsage(gpu=float("inf"))),
        gpu_queue("B", weight=-2, usage=ShareUsage(gpu=-1.0)),
        gpu_queue("C", weight=1),
    ]
    assert fair_gpus(divide_fair_share(queues, Resources(gpu_milli=5 * GPU), k_value=float("nan"))) == {
        "A": 0,
        "B": 0,
        "C": 5,
    }


# ---- properties ------------------------------------------------------------------------------------

PRIORITIES = (50, 100, 200)


@st.composite
def queue_forests(draw, whole_gpus=False):
    n = draw(st.integers(min_value=1, max_value=7))
    names = [f"q{i}" for i in range(n)]
    queues = []
    for i, name in enumerate(names):
        parent = draw(st.one_of(st.none(), st.sampled_from(names[:i]))) if i else None
        gpu_unit = GPU if whole_gpus else 1
        scale = 1 if whole_gpus else GPU

        def amount(high, unit=gpu_unit, scale=scale):
            return draw(st.integers(min_value=0, max_value=high * scale)) * unit

        quota = draw(st.one_of(st.just(UNLIMITED), st.builds(lambda: amount(5))))
        limit = draw(st.one_of(st.none(), st.just(UNLIMITED), st.builds(lambda: amount(8))))
        queues.append(
            QueueInput(
                name=name,
                parent=parent,
                priority=draw(st.sampled_from(PRIORITIES)),
                creation_key=draw(st.sampled_from(["", "2024-01-01", "2024-02-01"])),
                cpu=ShareResource(
                    draw(st.integers(-1, 3000)),
                    draw(st.one_of(st.none(), st.integers(-1, 5000))),
                    draw(st.integers(0, 3)),
                ),
                memory=ShareResource(draw(st.integers(-1, 3 * 10**9)), None, draw(st.integers(0, 3))),
                gpu=ShareResource(quota, limit, draw(st.sampled_from([0, 1, 1, 2, 3, 0.5]))),
                request=Resources(
                    cpu_milli=draw(st.integers(0, 4000)),
                    memory_bytes=draw(st.integers(0, 4 * 10**9)),
                    gpu_milli=amount(10),
                ),
                usage=ShareUsage(gpu=draw(st.sampled_from([0.0, 0.0, 0.25, 0.5, 1.0]))),
            )
        )
    if whole_gpus:
        gpus = draw(st.integers(min_value=0, max_value=20)) * GPU
    else:
        gpus = draw(st.one_of(st.integers(0, 20 * GPU), st.integers(0, 20).map(lambda n: n * GPU)))
    total = Resources(
        cpu_milli=draw(st.integers(0, 8000)), memory_bytes=draw(st.integers(0, 8 * 10**9)), gpu_milli=gpus
    )
    k = draw(st.sampled_from([0.0, 0.5, 1.0, 2.0]))
    return queues, total, k


def _groups(result):
    """(amount divided, sibling shares) per level, for every resource index."""
    levels = [(result.total, [result.queues[n] for n in result.tree.top_level()])]
    for share in result.queues.values():
        if share.children:
            levels.append((share.fair_share, [result.queues[c] for c in share.children]))
    return levels


def _requestable(share, r):
    limit, request = share.limit.values()[r], share.request.values()[r]
    return request if limit < 0 else min(limit, request)


@settings(max_examples=100, deadline=None)
@given(queue_forests())
def test_fair_share_bounds(case):
    queues, total, k = case
    result = divide_fair_share(queues, total, k)
    for amount, siblings in _groups(result):
        for r in range(3):
            divided = amount.values()[r]
            phase1 = 0
            for share in siblings:
                fair = share.fair_share.values()[r]
                deserved = share.deserved.values()[r]
                wanted = _requestable(share, r)
                assert fair >= min(deserved, wanted)  # at least its deserved part
                assert fair <= wanted  # never above request or limit
                if share.limit.values()[r] >= 0:
                    assert fair <= share.limit.values()[r]
                assert fair >= 0
                phase1 += min(deserved, wanted)
            if phase1 <= divided:  # quotas not oversubscribed
                assert sum(s.fair_share.values()[r] for s in siblings) <= divided


@settings(max_examples=50, deadline=None)
@given(queue_forests(), st.randoms(use_true_random=False))
def test_result_independent_of_input_order(case, rnd):
    queues, total, k = case
    shuffled = list(queues)
    rnd.shuffle(shuffled)
    assert divide_fair_share(shuffled, total, k).queues == divide_fair_share(queues, total, k).queues


@settings(max_examples=60, deadline=None)
@given(queue_forests(whole_gpus=True))
def test_whole_gpu_inputs_give_whole_gpu_fair_shares(case):
    queues, total, k = case
    result = divide_fair_share(queues, total, k)
    assert all(share.fair_share.gpu_milli % GPU == 0 for share in result.queues.values())


@settings(max_examples=60, deadline=None)
@given(queue_forests(whole_gpus=True))
def test_work_conserving_without_usage_and_zero_weights(case):
    queues, total, _ = case
    queues = [
        q._replace(usage=ShareUsage(), gpu=q.gpu._replace(over_quota_weight=max(1, q.gpu.over_quota_weight)))
        for q in queues
    ]
    result = divide_fair_share(queues, total, 1.0)
    for amount, siblings in _groups(result):
        divided = amount.gpu_milli
        wanted = sum(_requestable(s, 2) for s in siblings)
        phase1 = sum(min(s.deserved.gpu_milli, _requestable(s, 2)) for s in siblings)
        if phase1 <= divided:
            assert sum(s.fair_share.gpu_milli for s in siblings) == min(divided, wanted)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 12 * GPU), st.sampled_from([1, 2, 3]), st.sampled_from([100, 100, 200])),
        min_size=2,
        max_size=6,
    ),
    st.integers(0, 24 * GPU),
)
def test_competing_over_quota_queues_never_exceed_request(specs, gpus):
    queues = [
        gpu_queue(f"q{i}", weight=w, priority=p, request=Resources(gpu_milli=req))
        for i, (req, w, p) in enumerate(specs)
    ]
    result = divide_fair_share(queues, Resources(gpu_milli=gpus))
    fair = [result.queues[f"q{i}"].fair_share.gpu_milli for i in range(len(specs))]
    assert all(f <= req for f, (req, _, _) in zip(fair, specs, strict=True))
    assert sum(fair) == min(gpus, sum(req for req, _, _ in specs))


# ---- KAI's own division expectations (resource_division_test.go), restated ----------------------------


KAI_TWO_QUEUES = [
    # (total GPUs, {name: (quota, request, weight, limit, priority)}, expected GPUs)
    (15, {"1": (2, 6, 2, -1, 100), "2": (2, 6, 2, -1, 100)}, {"1": 6, "2": 6}),
    (12, {"1": (2, 6, 2, -1, 100), "2": (2, 6, 2, -1, 100)}, {"1": 6, "2": 6}),
    (8, {"1": (2, 6, 1, -1, 100), "2": (2, 6, 3, -1, 100)}, {"1": 3, "2": 5}),
    (12, {"1": (2, 6, 2, 5, 100), "2": (2, 6, 2, -1, 100)}, {"1": 5, "2": 6}),
    (11, {"1": (2, 10, 1, -1, 100), "2": (2, 10, 4, -1, 100)}, {"1": 3, "2": 8}),
    (11, {"1": (2, 6, 2, -1, 100), "2": (2, 6, 2, -1, 100)}, {"1": 6, "2": 5}),
    (4, {"1": (2, 6, 2, -1, 1), "2": (2, 6, 2, -1, 2)}, {"1": 2, "2": 2}),
    (6, {"1": (2, 6, 2, -1, 1), "2": (2, 6, 2, -1, 2)}, {"1": 2, "2": 4}),
    (6, {"1": (2, 6, 100, -1, 1), "2": (2, 6, 1, -1, 2)}, {"1": 2, "2": 4}),
    (5, {"1": (2, 5, 2, -1, 2), "2": (2, 5, 2, -1, 2), "3": (1, 0, 2, -1, 1)}, {"1": 3, "2": 2, "3": 0}),
    # one queue: within quota, limit, fractions, zero weight
    (2, {"1": (3, 2, 0, -1, 100)}, {"1": 2}),
    (3, {"1": (3, 2, 0, 2, 100)}, {"1": 2}),
    (7, {"1": (3, 5, 0, -1, 100)}, {"1": 3}),
    (2, {"1": (1.5, 2, 0, -1, 100)}, {"1": 1.5}),
    (2, {"1": (3, 1.5, 0, -1, 100)}, {"1": 1.5}),
    (6, {"1": (0, 5, 1, -1, 100)}, {"1": 5}),
    (3.5, {"1": (3, 5, 1, -1, 100)}, {"1": 3.5}),
    (10, {"1": (0, 5, 0, -1, 100)}, {"1": 0}),
]


def test_kai_division_table():
    for total, specs, expected in KAI_TWO_QUEUES:
        claims = [
            Claim(name, "", prio, int(quota * GPU), limit if limit < 0 else limit * GPU, int(req * GPU), w, 0)
            for name, (quota, req, w, limit, prio) in specs.items()
        ]
        got = divide_resource(int(total * GPU), claims, GPU, 0)
        assert got == {name: int(gpus * GPU) for name, gpus in expected.items()}, (total, specs)

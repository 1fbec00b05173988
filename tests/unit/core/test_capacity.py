"""Capacity checks (§3.4) with KAI's reasons and exact message texts (§2.2, S7-S13, S33)."""

from hypothesis import given
from hypothesis import strategies as st

from shoal.core.capacity import (
    NON_PREEMPTIBLE_OVER_QUOTA,
    OVER_LIMIT,
    QUEUE_DOES_NOT_EXIST,
    check_capacity,
    check_non_preemptible_quota,
    check_over_limit,
    go_float,
    humanize,
    non_preemptible_over_quota_message,
    over_limit_message,
    queue_does_not_exist,
    vector,
)
from shoal.core.fairshare import QueueInput, ShareResource, divide_fair_share
from shoal.core.resources import UNLIMITED, ZERO, Resources

GPU = 1000
OPEN = ShareResource(quota=UNLIMITED, limit=UNLIMITED, over_quota_weight=1)
CLUSTER = Resources(cpu_milli=64_000, memory_bytes=512 * 10**9, gpu_milli=8 * GPU)


def shares_of(*queues, total=CLUSTER):
    return divide_fair_share(queues, total).queues


def queue(name, gpu=OPEN, cpu=OPEN, memory=OPEN, parent="root", **kw):
    return QueueInput(name=name, parent=parent, cpu=cpu, memory=memory, gpu=gpu, **kw)


ROOT = queue("root", parent=None)


def test_s7_empty_limit_as_kai_caps_at_zero():
    # Ingest passes KAI's decoding (missing limit = 0) explicitly; Shoal's own rule is limit=None.
    shares = shares_of(ROOT, queue("q", gpu=ShareResource(quota=1 * GPU, limit=0)))
    verdict = check_capacity(shares, "q", Resources(gpu_milli=GPU), non_preemptible=False)
    assert verdict is not None and verdict.reason == OVER_LIMIT
    assert verdict.message == (
        "q quota has reached the allowable limit of GPUs. "
        "Limit is 0 GPUs, currently 0 GPUs allocated and workload requested 1 GPUs"
    )
    assert verdict.details.limit == vector(Resources(cpu_milli=UNLIMITED, memory_bytes=UNLIMITED))
    assert verdict.details.name == "q"


def test_s7_shoal_omitted_limit_is_the_quota():
    shares = shares_of(ROOT, queue("q", gpu=ShareResource(quota=1 * GPU, limit=None)))
    assert check_capacity(shares, "q", Resources(gpu_milli=GPU), non_preemptible=False) is None
    verdict = check_capacity(shares, "q", Resources(gpu_milli=2 * GPU), non_preemptible=False)
    assert verdict is not None
    assert verdict.message.endswith(
        "Limit is 1 GPUs, currently 0 GPUs allocated and workload requested 2 GPUs"
    )


def test_s8_cpu_is_checked_before_gpu():
    zero = ShareResource(quota=0, limit=0, over_quota_weight=0)
    shares = shares_of(ROOT, queue("q", gpu=ShareResource(2 * GPU, UNLIMITED), cpu=zero, memory=zero))
    verdict = check_capacity(shares, "q", Resources(cpu_milli=100, gpu_milli=GPU), non_preemptible=False)
    assert verdict is not None and verdict.reason == OVER_LIMIT
    assert verdict.message == (
        "q quota has reached the allowable limit of CPU cores. "
        "Limit is 0 cores, currently 0 cores allocated and workload requested 0.1 cores"
    )


def test_memory_variant():
    shares = shares_of(ROOT, queue("q", memory=ShareResource(0, 2 * 10**9)))
    verdict = check_capacity(shares, "q", Resources(memory_bytes=1610612736 * 2), non_preemptible=False)
    assert verdict is not None
    assert verdict.message == (
        "q quota has reached the allowable limit of memory. "
        "Limit is 2 GB, currently 0 GB allocated and workload requested 3.221 GB"
    )


def test_s9_over_quota_up_to_limit():
    spec = ShareResource(quota=1 * GPU, limit=2 * GPU)
    shares = shares_of(ROOT, queue("q", gpu=spec, allocated=Resources(gpu_milli=2 * GPU)))
    verdict = check_capacity(shares, "q", Resources(gpu_milli=GPU), non_preemptible=False)
    assert verdict is not None
    assert verdict.message == (
        "q quota has reached the allowable limit of GPUs. "
        "Limit is 2 GPUs, currently 2 GPUs allocated and workload requested 1 GPUs"
    )
    assert verdict.details.allocated == vector(Resources(gpu_milli=2 * GPU))
    assert verdict.details.pod_group_requested_non_preemptible == vector(ZERO)
    one = shares_of(ROOT, queue("q", gpu=spec, allocated=Resources(gpu_milli=GPU)))
    assert check_capacity(one, "q", Resources(gpu_milli=GPU), non_preemptible=False) is None


def test_s10_parent_limit_binds_and_is_named():
    shares = shares_of(
        ROOT,
        queue("p", gpu=ShareResource(UNLIMITED, 2 * GPU)),
        queue("c", parent="p", allocated=Resources(gpu_milli=2 * GPU)),
    )
    verdict = check_capacity(shares, "c", Resources(gpu_milli=GPU), non_preemptible=False)
    assert verdict is not None
    assert verdict.message.startswith("p quota has reached the allowable limit of GPUs. Limit is 2 GPUs, ")
    assert verdict.details.name == "p"


def test_display_name_is_used_in_messages():
    shares = shares_of(ROOT, queue("q", gpu=ShareResource(0, 0), display_name="Team Q"))
    verdict = check_capacity(shares, "q", Resources(gpu_milli=GPU), non_preemptible=False)
    assert verdict is not None and verdict.message.startswith("Team Q quota has reached")
    assert verdict.details.name == "q"


def test_s11_non_preemptible_stays_within_quota():
    spec = ShareResource(quota=2 * GPU, limit=UNLIMITED)
    full = Resources(gpu_milli=2 * GPU)
    shares = shares_of(ROOT, queue("q", gpu=spec, allocated=full, allocated_non_preemptible=full))
    verdict = check_capacity(shares, "q", Resources(gpu_milli=GPU), non_preemptible=True)
    assert verdict is not None and verdict.reason == NON_PREEMPTIBLE_OVER_QUOTA
    assert verdict.message == (
        "Non-preemptible workload is over quota. Workload requested 1 GPUs, but q quota is 2 GPUs, "
        "while 2 GPUs are already allocated for non-preemptible pods. "
        "Use a preemptible workload to go over quota."
    )
    assert verdict.details.pod_group_requested_non_preemptible == vector(Resources(gpu_milli=GPU))
    assert check_capacity(shares, "q", Resources(gpu_milli=GPU), non_preemptible=False) is None


def test_s12_default_queue_gotcha_reports_cpu_cores():
    default = ShareResource(quota=0, limit=UNLIMITED)
    shares = shares_of(ROOT, queue("default-queue", gpu=default, cpu=default, memory=default))
    verdict = check_capacity(shares, "default-queue", Resources(cpu_milli=100), non_preemptible=True)
    assert verdict is not None and verdict.reason == NON_PREEMPTIBLE_OVER_QUOTA
    assert verdict.message == (
        "Non-preemptible workload is over quota. Workload requested 0.1 CPU cores, but default-queue quota "
        "is 0 cores, while 0 cores are already allocated for non-preemptible pods. "
        "Use a preemptible workload to go over quota."
    )
    assert check_capacity(shares, "default-queue", Resources(cpu_milli=100), non_preemptible=False) is None


def test_non_preemptible_memory_variant_and_ancestor_quota():
    shares = shares_of(
        queue("root", parent=None, memory=ShareResource(10**9, UNLIMITED)),
        queue("q"),
    )
    verdict = check_non_preemptible_quota(shares, "q", Resources(memory_bytes=2 * 10**9))
    assert verdict is not None
    assert verdict.message == (
        "Non-preemptible workload is over quota. Workload requested 2 GB memory, but root quota is 1 GB, "
        "while 0 GB are already allocated for non-preemptible pods. Use a preemptible workload to go over quota."
    )
    assert verdict.details.name == "root"


def test_unlimited_quota_skips_the_non_preemptible_check():
    shares = shares_of(ROOT, queue("q", allocated_non_preemptible=Resources(gpu_milli=100 * GPU)))
    assert check_non_preemptible_quota(shares, "q", Resources(gpu_milli=GPU)) is None


def test_s33_fractions_count_against_the_limit():
    shares = shares_of(ROOT, queue("q", gpu=ShareResource(0, 1 * GPU), allocated=Resources(gpu_milli=1000)))
    verdict = check_over_limit(shares, "q", Resources(gpu_milli=500), non_preemptible=False)
    assert verdict is not None
    assert verdict.message.endswith(
        "Limit is 1 GPUs, currently 1 GPUs allocated and workload requested 0.5 GPUs"
    )
    half = shares_of(ROOT, queue("q", gpu=ShareResource(0, 1 * GPU), allocated=Resources(gpu_milli=500)))
    assert check_over_limit(half, "q", Resources(gpu_milli=500), non_preemptible=False) is None


def test_s13_missing_queue():
    verdict = queue_does_not_exist("nope")
    assert verdict.reason == QUEUE_DOES_NOT_EXIST
    assert verdict.message == "Queue 'nope' does not exist"
    assert check_capacity(shares_of(ROOT), "nope", Resources(gpu_milli=GPU), non_preemptible=False) == verdict


def test_zero_request_is_never_over_a_zero_limit():
    shares = shares_of(ROOT, queue("q", gpu=ShareResource(0, 0), cpu=ShareResource(0, 0)))
    assert check_capacity(shares, "q", ZERO, non_preemptible=True) is None


def test_humanize_truncates_like_kai():
    assert humanize("gpu", 0) == "0"
    assert humanize("gpu", 500) == "0.5"
    assert humanize("gpu", 12_000) == "12"
    assert humanize("gpu", UNLIMITED) == "Unlimited"
    assert humanize("cpu", 100) == "0.1"
    assert humanize("cpu", 1) == "0.001"
    assert humanize("cpu", 2500) == "2.5"
    assert humanize("memory", 1610612736) == "1.61"  # 1.610613 truncated, not rounded to 1.611
    assert humanize("memory", 999_999_999) == "1"  # rounded at 6 digits first, as Go's FormatFloat


def test_go_float_matches_go_percent_v():
    assert [go_float(v) for v in (1.0, 0.5, 0.001, 2.0, 123456.0, 1e6, 2.5e6, 1e-5)] == [
        "1",
        "0.5",
        "0.001",
        "2",
        "123456",
        "1e+06",
        "2.5e+06",
        "1e-05",
    ]


@given(
    st.integers(0, 10 * GPU),
    st.integers(0, 10 * GPU),
    st.integers(0, 10 * GPU),
    st.integers(0, 10 * GPU),
)
def test_over_limit_iff_allocated_plus_request_exceeds_limit(leaf_limit, parent_limit, allocated, request):
    shares = shares_of(
        ROOT,
        queue("p", gpu=ShareResource(UNLIMITED, parent_limit)),
        queue(
            "c",
            parent="p",
            gpu=ShareResource(UNLIMITED, leaf_limit),
            allocated=Resources(gpu_milli=allocated),
        ),
    )
    verdict = check_over_limit(shares, "c", Resources(gpu_milli=request), non_preemptible=False)
    over_leaf = request > 0 and leaf_limit < allocated + request
    over_parent = request > 0 and parent_limit < allocated + request
    assert (verdict is not None) == (over_leaf or over_parent)
    if verdict is not None:
        assert verdict.details.name == ("c" if over_leaf else "p")


def test_message_builders_match_kai_test_expectations():
    gb = 10**9
    assert over_limit_message("gpu-queue", "gpu", 8 * GPU, 6 * GPU, 4 * GPU) == (
        "gpu-queue quota has reached the allowable limit of GPUs. "
        "Limit is 8 GPUs, currently 6 GPUs allocated and workload requested 4 GPUs"
    )
    assert over_limit_message("cpu-queue", "cpu", 16_000, 12_000, 8_000) == (
        "cpu-queue quota has reached the allowable limit of CPU cores. "
        "Limit is 16 cores, currently 12 cores allocated and workload requested 8 cores"
    )
    assert over_limit_message("memory-queue", "memory", 500 * gb, 400 * gb, 200 * gb) == (
        "memory-queue quota has reached the allowable limit of memory. "
        "Limit is 500 GB, currently 400 GB allocated and workload requested 200 GB"
    )
    assert "Workload requested 6 CPU cores, but cpu-queue quota is 8 cores, while 4 cores are already " in (
        non_preemptible_over_quota_message("cpu-queue", "cpu", 8_000, 4_000, 6_000)
    )
    assert "Workload requested 200 GB memory, but memory-queue quota is 100 GB, while 50 GB are already " in (
        non_preemptible_over_quota_message("memory-queue", "memory", 100 * gb, 50 * gb, 200 * gb)
    )

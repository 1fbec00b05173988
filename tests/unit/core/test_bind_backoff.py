"""Back-off after failed binds (KAI issue #2075): a job whose bind keeps failing must not starve the others."""

from __future__ import annotations

from builders import NS, cluster, job, node, pod, queue, schedule

from shoal.core import bindbackoff
from shoal.core.model import ANNOTATION_BIND_FAILURES, PodGroup, ShardConfig
from shoal.core.plan import Annotate, Evict, PodEvent
from shoal.core.timetext import rfc3339

NOW = 1_000_000


def doomed(failures: int, seconds_ago: int, **kw):
    # inference (125) comes before train (50): without a back-off it wins the only GPU every cycle
    return job("doomed", queue="q", pods=1, gpus=1, priority_class="inference", created=0,
               bind_failures=failures, last_bind_failure=rfc3339(NOW - seconds_ago),
               last_bind_error="admission webhook denied the binding", **kw)


def other():
    return job("other", queue="q", pods=1, gpus=1, created=10)


def run(*jobs, config=None):
    return schedule(cluster(nodes=[node("n1", gpus=1)], queues=[queue("q")], jobs=list(jobs), now=NOW,
                            config=config))


def test_the_interval_doubles_from_the_initial_value_up_to_the_cap():
    cfg = ShardConfig()
    assert [bindbackoff.backoff_s(n, cfg) for n in (0, 1, 2, 3, 4, 7, 50)] == [0, 5, 10, 20, 40, 300, 300]
    small = ShardConfig(bind_backoff_initial_s=1, bind_backoff_max_s=8)
    assert [bindbackoff.backoff_s(n, small) for n in (1, 2, 3, 4, 5)] == [1, 2, 4, 8, 8]


def test_a_job_backing_off_lets_the_next_job_have_the_gpu_and_says_why():
    r = run(doomed(failures=1, seconds_ago=2), other())
    assert r.bound() == {"other-0": "n1"}
    condition = r.condition("doomed")
    assert condition.reason == bindbackoff.BIND_BACKOFF
    assert condition.message == (
        "BindBackoff: Binding failed 1 time(s), last: admission webhook denied the binding; the job backs off 5s "
        f"(at most 5m0s) and is planned again after {rfc3339(NOW + 3)}.")
    (event,) = [e for e in r.plan.of(PodEvent) if e.pod == f"{NS}/doomed-0"]
    assert "backs off 5s" in event.message


def test_after_the_back_off_the_job_is_planned_again_in_its_turn():
    assert run(doomed(failures=1, seconds_ago=6), other()).bound() == {"doomed-0": "n1"}
    # the third failure waits 20 s
    assert run(doomed(failures=3, seconds_ago=19), other()).bound() == {"other-0": "n1"}
    assert run(doomed(failures=3, seconds_ago=21), other()).bound() == {"doomed-0": "n1"}


def test_a_job_backing_off_evicts_nobody():
    # the GPU is held by a preemptible train pod: preempt would evict it for the inference job
    running = job("train", queue="q", pods=[pod("train-0", gpus=1, node_name="n1")])
    assert run(doomed(failures=2, seconds_ago=1), running).plan.of(Evict) == []
    assert run(doomed(failures=2, seconds_ago=11), running).plan.of(Evict) != []


def test_the_count_is_cleared_once_the_job_has_no_pending_pod():
    bound = job("doomed", queue="q", pods=[pod("doomed-0", gpus=1, node_name="n1")], bind_failures=4,
                last_bind_failure=rfc3339(NOW - 1), last_bind_error="x")
    cleared = {(a.key, a.value) for a in run(bound).plan.of(Annotate) if a.pod_group == f"{NS}/doomed"}
    assert (ANNOTATION_BIND_FAILURES, "") in cleared and len(cleared) == 3


def test_no_failures_no_back_off():
    assert bindbackoff.retry_at(PodGroup(namespace=NS, name="g"), ShardConfig()) is None

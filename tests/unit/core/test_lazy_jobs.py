"""Jobs made on demand (session.JobIndex) and the cycle's shared victim pool (victims.VictimPool).

- The plan of a cycle whose session makes jobs only when something reads them equals the plan of one
  that makes every job while building (`eager_jobs=True`), on generated clusters with many small jobs:
  elastic jobs, gangs (some below their minimum), subgroups, releasing pods, shared GPUs, PDB-blocked
  pods, finished pods, pods on nodes outside the shard, stale stamps, conditions, duplicate uids and creation-time ties, several namespaces.
- The pool's victim order equals a plain sort of every candidate job by the victim order (priority,
  above-min first, newest, uid and name descending), before and after committed evictions that change
  a job's above-minimum state (the pool re-ranks it when the next action asks for it), and a pool first built
  after them has the same order (an action asks for it only when its first attempt starts).
"""

from __future__ import annotations

from builders import PRIORITY_CLASSES, queue
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.core.context import Context
from shoal.core.cycle import run_cycle
from shoal.core.model import FractionRequest, Node, Pod, PodGroup, ShardConfig, SubGroup, make_snapshot
from shoal.core.ordering import elastic_state
from shoal.core.session import Session
from shoal.core.victims import is_victim_candidate, job_chunks

QUEUES = ("a", "b", "c")
CLASSES = sorted(c.name for c in PRIORITY_CLASSES)


@st.composite
def clusters(draw):
    nodes = [Node(name=f"n{i}", gpus=8, cpu_milli=64_000, memory_bytes=2**36, gpu_memory_mib=40960)
             for i in range(draw(st.integers(1, 4)))]
    free = {n.name: 8 for n in nodes}
    queues = [queue("root", parent=None)]
    for name in QUEUES:
        queues.append(queue(name, gpu=(draw(st.integers(0, 8)), -1, draw(st.integers(1, 3)))))
    groups, pods = [], []
    for j in range(draw(st.integers(1, 14))):
        ns = draw(st.sampled_from(["ns", "ns", "other"]))
        name = f"j{j}"
        size = draw(st.integers(1, 4))
        min_member = draw(st.integers(0, size))
        subgroups = ()
        if size >= 2 and draw(st.integers(0, 5)) == 0:
            subgroups = (SubGroup(name="x", min_member=1), SubGroup(name="y", min_member=1))
        groups.append(PodGroup(
            namespace=ns, name=name, queue=draw(st.sampled_from(QUEUES)),
            uid=draw(st.sampled_from([f"u{j}", "same"])),  # ties on uid: the name decides, then position
            min_member=min_member, subgroups=subgroups,
            priority_class_name=draw(st.sampled_from(CLASSES)),
            preemptibility=draw(st.sampled_from(["", "", "preemptible", "non-preemptible"])),
            created=draw(st.integers(0, 3)),
            stale_timestamp="1970-01-01T00:00:00Z" if draw(st.integers(0, 9)) == 0 else None,
            condition_reason="Unschedulable" if draw(st.integers(0, 9)) == 0 else None,
        ))
        for i in range(size):
            gpus = draw(st.integers(0, 2))
            frac = draw(st.integers(0, 6)) == 0
            spot = None
            if draw(st.integers(0, 3)) > 0:  # mostly running
                spot = next((n for n in sorted(free) if free[n] >= max(gpus, 1)), None)
            if spot is not None:
                free[spot] -= 1 if frac else gpus
            gone = "gone" if spot is None and draw(st.integers(0, 2)) == 0 else None  # a node not in the shard
            pods.append(Pod(
                uid=f"u{name}-{i}", namespace=ns, name=f"{name}-{i}", pod_group=name,
                subgroup=("x" if i % 2 == 0 else "y") if subgroups else None,
                gpus=0 if frac else gpus, cpu_milli=1000,
                fraction=FractionRequest(portion_milli=500) if frac else None,
                gpu_groups=(f"g-{spot}",) if frac and spot else (),
                node_name=spot or gone, created=draw(st.integers(0, 3)),
                phase=draw(st.sampled_from(["Running"] * 8 + ["Succeeded"])) if spot or gone else "Pending",
                deleting=spot is not None and draw(st.integers(0, 9)) == 0,
                eviction_blocked=spot is not None and draw(st.integers(0, 14)) == 0,
            ))
    config = ShardConfig(default_staleness_grace_s=0)
    return make_snapshot(nodes=nodes, pods=pods, pod_groups=groups, queues=queues,
                         priority_classes=PRIORITY_CLASSES, config=config, now=1000, revision=1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_lazy_jobs_give_the_eager_plan(snap):
    assert run_cycle(snap) == run_cycle(snap, eager_jobs=True)


def _reference(session: Session, queues) -> list[str]:
    """The victim order as a plain sort over every job (ties: uid, name descending, then position)."""
    found = [j for j in session.jobs.values() if j.queue in queues and is_victim_candidate(j)]
    found.sort(key=lambda j: (j.group.uid, j.group.name), reverse=True)
    found.sort(key=lambda j: (j.priority, -elastic_state(j), -j.created))
    return [j.key for j in found]


def _order(ctx: Context) -> list[str]:
    pool = ctx.victim_pool()
    return [j.key for j in pool.jobs(sorted(pool.by_queue))]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.data())
def test_victim_pool_order_is_the_sorted_order(snap, data):
    lazy = Context(Session(snap))
    eager = Context(Session(snap, eager_jobs=True))
    assert _order(lazy) == _reference(eager.session, eager.shares)
    for name in QUEUES:  # one queue at a time (preempt) and its head's priority
        pool = lazy.victim_pool()
        keys = [j.key for j in pool.jobs([name])]
        assert keys == _reference(eager.session, {name})
        head = pool.head(name)
        assert (head is None) == (not keys)
        if keys:
            assert head[0] == eager.session.jobs[keys[0]].priority
    # committed evictions of some jobs' pods above their minimum: those jobs are ranked again
    order = [k for k in _order(lazy) if not job_chunks(lazy.session.jobs[k])[0].core]  # above their minimum
    picked = data.draw(st.lists(st.sampled_from(order), unique=True, max_size=3)) if order else []
    late = Context(Session(snap))  # its pool first asked for after the evictions (`Context.action_victims`)
    for ctx in (lazy, eager, late):
        for key in picked:
            chunks = job_chunks(ctx.session.jobs[key])
            for task in chunks[0].tasks:
                ctx.statement.evict(task, "reclaim", "ns/x", "")
        ctx.accept(ctx.statement.commit())
    assert _order(lazy) == _reference(eager.session, eager.shares)
    assert _order(late) == _reference(eager.session, eager.shares)


def test_a_job_that_lost_pods_above_its_minimum_is_ranked_again():
    groups = [PodGroup(namespace="ns", name=n, uid=f"u{n}", queue="a", min_member=1, priority_class_name="train",
                       created=c) for n, c in (("a", 5), ("b", 0), ("c", 10))]
    pods = [Pod(uid=f"u{g}{i}", namespace="ns", name=f"{g}{i}", pod_group=g, gpus=1, node_name="n0",
                phase="Running") for g, n in (("a", 2), ("b", 2), ("c", 1)) for i in range(n)]
    snap = make_snapshot(nodes=[Node(name="n0", gpus=8, cpu_milli=64_000, memory_bytes=2**36)], pods=pods,
                         pod_groups=groups, queues=[queue("root", parent=None), queue("a")],
                         priority_classes=PRIORITY_CLASSES, now=1000)
    ctx = Context(Session(snap))
    assert _order(ctx) == ["ns/a", "ns/b", "ns/c"]  # above their minimum first, then the newest
    extra = job_chunks(ctx.session.jobs["ns/a"])[0]
    assert not extra.core
    ctx.statement.evict(extra.tasks[0], "reclaim", "ns/x", "")
    ctx.accept(ctx.statement.commit())
    assert _order(ctx) == ["ns/b", "ns/c", "ns/a"]  # a is at its minimum now, and older than c


def test_eviction_actions_with_no_job_to_place_build_no_victim_pool():
    """Every pending pod fits: reclaim, preempt and consolidation start no attempt, so the running jobs are
    never ranked as victims (a busy cluster's usual cycle); a pod that does not fit makes the pool."""
    from shoal.core.cycle import ACTIONS, enabled_actions

    def cycle_ctx(pending_gpus: int) -> Context:
        groups = [PodGroup(namespace="ns", name=n, uid=f"u{n}", queue="a", min_member=1,
                           priority_class_name="train", created=c) for n, c in (("run", 0), ("new", 1))]
        pods = [Pod(uid="urun", namespace="ns", name="run0", pod_group="run", gpus=4, node_name="n0",
                    phase="Running"),
                Pod(uid="unew", namespace="ns", name="new0", pod_group="new", gpus=pending_gpus)]
        snap = make_snapshot(nodes=[Node(name="n0", gpus=8, cpu_milli=64_000, memory_bytes=2**36)], pods=pods,
                             pod_groups=groups, queues=[queue("root", parent=None), queue("a", gpu=(8, -1, 1))],
                             priority_classes=PRIORITY_CLASSES, now=1000)
        ctx = Context(Session(snap))
        for name in enabled_actions(snap):
            ACTIONS[name](ctx)
        return ctx

    assert cycle_ctx(pending_gpus=2)._victims is None
    assert cycle_ctx(pending_gpus=6)._victims is not None

"""The reversible statement: allocate / pipeline / evict, checkpoint / rollback / commit."""

from __future__ import annotations

import pytest
from builders import cluster, job, node, pod, queue

from shoal.core.session import ACTIVE, ALLOCATED, PENDING, PIPELINED, RELEASING, RUNNING, Session
from shoal.core.statement import GroupPick, Statement


def fingerprint(session: Session):
    nodes = []
    for ns in session.nodes:
        groups = tuple(
            sorted((g.id, g.used, g.releasing, g.members, g.active_members) for g in ns.groups.values())
        )
        nodes.append(
            (
                ns.name,
                ns.idle_cpu,
                ns.idle_mem,
                ns.idle_gpus,
                ns.idle_pods,
                ns.rel_cpu,
                ns.rel_mem,
                ns.rel_gpus,
                ns.rel_pods,
                groups,
            )
        )
    tasks = tuple(
        sorted(
            (t.key, t.status, t.node.name if t.node else None, t.groups)
            for j in session.jobs.values()
            for t in j.tasks
        )
    )
    queues = tuple(sorted((q.name, tuple(q.alloc), tuple(q.alloc_np)) for q in session.queues.values()))
    for j in session.jobs.values():  # the statement keeps each leaf's active count equal to a recount
        assert j.root.active == sum(1 for t in j.root.tasks if t.status in ACTIVE), j.key
    return tuple(nodes), tasks, queues


def _session():
    running = job(
        "run",
        pods=[
            pod("run-0", gpus=2, cpu=1000, node_name="n1"),
            pod("run-1", fraction=0.5, node_name="n1", gpu_groups=("g1",)),
        ],
    )
    pending = job("p", pods=3, gpus=1, cpu=500)
    frac = job("f", fraction=0.25)
    snap = cluster(
        nodes=[node("n1", gpus=4, pods=10), node("n2", gpus=2)],
        queues=[queue("q")],
        jobs=[running, pending, frac],
    )
    return Session(snap)


def _task(session, key):
    for j in session.jobs.values():
        for t in j.tasks:
            if t.key == key:
                return t
    raise KeyError(key)


def test_session_build_accounts_running_pods_and_shared_groups():
    s = _session()
    n1 = s.node_by_name["n1"]
    assert n1.idle_gpus == 4 - 2 - 1  # two whole GPUs + one shared group
    assert n1.idle_pods == 8 and n1.idle_cpu == 64_000 - 1000
    assert n1.groups["g1"].used == 500
    assert s.queues["q"].alloc == [1000, 0, 2500] and s.queues["root"].alloc == [1000, 0, 2500]


def test_rollback_restores_everything():
    s = _session()
    st = Statement(s)
    before = fingerprint(s)
    cp = st.checkpoint()
    n1, n2 = s.node_by_name["n1"], s.node_by_name["n2"]
    st.allocate(_task(s, "ns/p-0"), n2)
    st.pipeline(_task(s, "ns/p-1"), n1)
    st.allocate(_task(s, "ns/f-0"), n1, [GroupPick("g1", False, False)])
    st.evict(_task(s, "ns/run-0"), "preempt", "ns/p", "msg")
    st.convert_to_pipelined(st.pending_ops())
    assert fingerprint(s) != before
    st.rollback(cp)
    assert fingerprint(s) == before
    assert _task(s, "ns/p-0").status == PENDING and _task(s, "ns/run-0").status == RUNNING


def test_commit_returns_ops_and_blocks_rollback_past_it():
    s = _session()
    st = Statement(s)
    n2 = s.node_by_name["n2"]
    st.allocate(_task(s, "ns/p-0"), n2)
    ops = st.commit()
    assert [(o.kind, o.task.key, o.node.name) for o in ops] == [("allocate", "ns/p-0", "n2")]
    assert n2.idle_gpus == 1 and _task(s, "ns/p-0").status == ALLOCATED
    with pytest.raises(ValueError):
        st.rollback(0)


def test_evict_makes_resources_releasing_and_pipeline_takes_them():
    s = _session()
    st = Statement(s)
    n1 = s.node_by_name["n1"]
    victim = _task(s, "ns/run-0")
    st.evict(victim, "reclaim", "ns/p", "Pod ns/run-0 was preempted")
    assert victim.status == RELEASING
    assert (n1.rel_gpus, n1.rel_cpu, n1.rel_pods) == (2, 1000, 1)
    assert s.queues["q"].alloc[2] == 500
    p0 = _task(s, "ns/p-0")
    st.pipeline(p0, n1)
    assert p0.status == PIPELINED
    assert n1.rel_gpus == 1 and n1.idle_gpus == 1  # taken from releasing first
    ops = st.commit()
    assert [o.kind for o in ops] == ["evict", "pipeline"]
    assert ops[0].action == "reclaim" and ops[0].by == "ns/p"


def test_evicting_last_member_of_shared_group_releases_the_gpu():
    s = _session()
    st = Statement(s)
    n1 = s.node_by_name["n1"]
    cp = st.checkpoint()
    st.evict(_task(s, "ns/run-1"))
    assert n1.rel_gpus == 1 and n1.groups["g1"].releasing == 500
    st.rollback(cp)
    assert n1.rel_gpus == 0 and n1.groups["g1"].active_members == 1


def test_new_group_from_idle_gpu_and_undo():
    s = _session()
    st = Statement(s)
    n2 = s.node_by_name["n2"]
    cp = st.checkpoint()
    op = st.allocate(_task(s, "ns/f-0"), n2, [GroupPick("new-1", True, False)])
    assert op.new_groups == (("new-1", 0),)
    assert n2.idle_gpus == 1 and n2.idle_pods == 108 and n2.groups["new-1"].used == 250
    st.rollback(cp)
    assert n2.idle_gpus == 2 and n2.idle_pods == 110 and "new-1" not in n2.groups


def test_only_running_tasks_can_be_evicted():
    s = _session()
    with pytest.raises(ValueError):
        Statement(s).evict(_task(s, "ns/p-0"))


def test_failure_memo_is_dropped_by_rollback_and_evict():
    s = _session()
    st = Statement(s)
    st.allocate(_task(s, "ns/p-0"), s.node_by_name["n2"])
    cp_after = st.checkpoint()
    st.remember_failure("sig", "no nodes")
    assert st.known_failure("sig") == "no nodes"
    st.rollback(cp_after)  # same position: still valid (state unchanged)
    assert st.known_failure("sig") == "no nodes"
    st.rollback(0)  # resources came back: forget
    assert st.known_failure("sig") is None
    st.remember_failure("sig", "no nodes")
    st.evict(_task(s, "ns/run-0"))
    assert st.known_failure("sig") is None

"""SPEC §4 "only needed victims" as a hypothesis property, on clusters as varied as the shared generator's.

The clusters mix what made the eviction actions over-evict at scale: nodes filled by single-pod CPU-only
jobs next to whole-GPU pods, shared GPUs held by fractional pods, gangs spread over several nodes (some
elastic), two departments of projects with quotas, limits (some at a hard cap) and weights, and pending
work of every shape and priority class. Each plan must keep `audit.unneeded_evictions` empty: every
eviction by consolidation, reclaim or preempt is on a node where its evictor is bound or pipelined, or is a
gang-mate its gang must lose; a preemptor placed on idle capacity evicts nothing.
"""

from __future__ import annotations

from builders import NS, PRIORITY_CLASSES, queue
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.core.audit import eviction_figures, unneeded_evictions
from shoal.core.cycle import run_cycle
from shoal.core.model import FractionRequest, Node, Pod, PodGroup, ShardConfig, make_snapshot
from shoal.core.plan import Bind, Evict, Pipeline

GI = 1024**3
CLASSES = ["train", "train", "build-preemptible", "build", "inference"]
PROJECTS = ("d1-p1", "d1-p2", "d2-p1", "d2-p2")


def _queues(draw) -> list:
    out = [queue("root", parent=None)]
    for dept in ("d1", "d2"):
        limit = draw(st.sampled_from([-1, -1, draw(st.integers(4, 24))]))
        out.append(queue(dept, gpu=(draw(st.integers(0, 12)), limit, draw(st.integers(1, 3)))))
    for name in PROJECTS:
        quota = draw(st.integers(0, 8))
        limit = draw(st.sampled_from([-1, -1, quota, quota + draw(st.integers(1, 8))]))
        cpu = draw(st.sampled_from([None, (draw(st.integers(0, 64)) * 1000, -1)]))
        out.append(queue(name, parent=name[:2], gpu=(quota, limit, draw(st.integers(1, 4))), cpu=cpu,
                         priority=draw(st.sampled_from([100, 100, 100, 200]))))
    return out


class _Packer:
    """Places running pods greedily, in the order drawn, so the cluster starts consistent."""

    def __init__(self, nodes: list[Node]) -> None:
        self.free = {n.name: [n.gpus, n.cpu_milli, n.memory_bytes, n.pods] for n in nodes}
        self.shared: dict[str, list[list]] = {n.name: [] for n in nodes}  # [group id, free milli]
        self.groups = 0

    def whole(self, order: list[str], gpus: int, cpu: int, mem: int) -> str | None:
        for name in order:
            f = self.free[name]
            if f[0] >= gpus and f[1] >= cpu and f[2] >= mem and f[3] >= 1:
                f[0] -= gpus
                f[1] -= cpu
                f[2] -= mem
                f[3] -= 1
                return name
        return None

    def fraction(self, order: list[str], milli: int, cpu: int, mem: int) -> tuple[str, str] | None:
        for name in order:
            f = self.free[name]
            if f[1] < cpu or f[2] < mem or f[3] < 1:
                continue
            spot = next((g for g in self.shared[name] if g[1] >= milli), None)
            if spot is None and f[0] >= 1:
                self.groups += 1
                spot = [f"g{self.groups}", 1000]
                self.shared[name].append(spot)
                f[0] -= 1
            if spot is None:
                continue
            spot[1] -= milli
            f[1] -= cpu
            f[2] -= mem
            f[3] -= 1
            return name, spot[0]
        return None


@st.composite
def clusters(draw):
    nodes = [Node(name=f"n{i}", gpus=draw(st.sampled_from([4, 8, 8])), cpu_milli=draw(st.sampled_from([16, 32, 64]))
                  * 1000, memory_bytes=256 * GI, pods=draw(st.sampled_from([8, 16, 110])), gpu_memory_mib=40960)
             for i in range(draw(st.integers(2, 6)))]
    packer = _Packer(nodes)
    names = [n.name for n in nodes]
    groups, pods = [], []
    for j in range(draw(st.integers(4, 22))):
        kind = draw(st.sampled_from(["cpu", "cpu", "gpu", "frac", "gang"]))
        running = draw(st.booleans()) or kind == "cpu"
        size = draw(st.integers(2, 5)) if kind == "gang" else 1
        gpus = {"cpu": 0, "frac": 0, "gpu": draw(st.sampled_from([1, 1, 2, 4])),
                "gang": draw(st.sampled_from([1, 2, 4]))}[kind]
        cpu = draw(st.sampled_from([500, 2000, 4000, 8000]))
        mem = draw(st.sampled_from([1, 4, 16])) * GI
        milli = draw(st.sampled_from([250, 500])) if kind == "frac" else None
        min_member = draw(st.integers(1, size))
        name = f"j{j}"
        placed: list[tuple[str, tuple[str, ...]]] = []
        if running:
            order = draw(st.permutations(names))
            for _ in range(size):
                if milli is not None:
                    got = packer.fraction(order, milli, cpu, mem)
                    spot = (got[0], (got[1],)) if got else None
                else:
                    node = packer.whole(order, gpus, cpu, mem)
                    spot = (node, ()) if node else None
                if spot is None:
                    break
                placed.append(spot)
            if len(placed) < min_member:  # the packer cannot undo: leave what fit running as smaller gang
                min_member = max(len(placed), 1)
        q = draw(st.sampled_from(PROJECTS))
        groups.append(PodGroup(namespace=NS, name=name, uid=f"u{name}", queue=q, min_member=min_member,
                               priority_class_name=draw(st.sampled_from(CLASSES)), created=j))
        count = size if not running else max(len(placed), 1)
        for i in range(count):
            node_name, gids = placed[i] if i < len(placed) else (None, ())
            pods.append(Pod(uid=f"u{name}-{i}", namespace=NS, name=f"{name}-{i}", pod_group=name, gpus=gpus,
                            cpu_milli=cpu, memory_bytes=mem,
                            fraction=FractionRequest(portion_milli=milli) if milli else None,
                            gpu_groups=gids, node_name=node_name,
                            phase="Running" if node_name else "Pending", created=j * 10 + i))
    config = ShardConfig(gpu_placement=draw(st.sampled_from(["binpack", "binpack", "spread"])),
                         victim_budget_per_job=draw(st.sampled_from([1_000, 3])))
    return dict(nodes=nodes, pods=pods, pod_groups=groups, queues=_queues(draw),
                priority_classes=PRIORITY_CLASSES, config=config, now=1000, revision=1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_every_eviction_is_needed_by_its_evictors_placement(spec):
    snap = make_snapshot(**spec)
    plan = run_cycle(snap)
    assert unneeded_evictions(snap, plan) == []
    placed = {op.pod_group for op in plan.ops if isinstance(op, (Bind, Pipeline))}
    for ev in plan.of(Evict):
        if ev.action != "stalegangeviction":
            assert ev.by in placed, ev  # an evictor that evicts is placed in the same plan
    evicted = {op.pod for op in plan.of(Evict)}
    for group in snap.pod_groups:  # a victim gang keeps its minimum or goes whole
        running = [p for p in snap.pods if p.pod_group == group.name and p.node_name]
        left = [p for p in running if p.key not in evicted]
        if len(left) < len(running):
            assert not left or len(left) >= group.min_member, (group.name, [p.key for p in left])


def test_audit_reports_an_eviction_off_the_evictors_nodes():
    """The check itself can fail: a victim on a node the evictor does not use is reported."""
    snap = make_snapshot(nodes=[Node(name="n0", gpus=1), Node(name="n1", gpus=1)],
                         pods=[Pod(uid="v", namespace=NS, name="v-0", pod_group="v", gpus=1, node_name="n1",
                                   phase="Running")],
                         pod_groups=[PodGroup(namespace=NS, name="v", uid="uv", queue="d1-p1")],
                         queues=[queue("root", parent=None), queue("d1-p1")], priority_classes=PRIORITY_CLASSES,
                         config=ShardConfig(), now=1000, revision=1)
    from shoal.core.plan import Plan

    plan = Plan(plan_id="x", revision=1, ops=(
        Pipeline(pod="ns/p-0", pod_uid="p", node="n0", pod_group="ns/p"),
        Evict(pod="ns/v-0", pod_uid="v", node="n1", action="reclaim", by="ns/p", message="", pod_group="ns/v"),
    ))
    assert [e.pod for e in unneeded_evictions(snap, plan)] == ["ns/v-0"]
    assert eviction_figures(plan) == {"reclaim": {"evictions": 1, "placed": 1, "pipelined": 1}}

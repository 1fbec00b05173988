"""Mutable per-cycle state built from a Snapshot: nodes, shared GPU groups, jobs, tasks, queue accounting.

The state is private to one cycle; every change goes through `statement.Statement`, which keeps an undo
log. Units: cpu millicores, memory bytes, whole GPUs per node, shared-GPU use in milli-device
(a 0.5 fraction uses 500 of a group's 1000; a gpu-memory request uses ceil(mem * 1000 / node memory)).
Queue figures are [cpu_milli, memory_bytes, gpu_milli] lists, the order of `resources.RESOURCE_ORDER`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import lru_cache, partial
from itertools import compress, groupby
from operator import attrgetter, is_, methodcaller
from typing import TYPE_CHECKING

from shoal.core import model
from shoal.core.model import Node, Pod, PodGroup, Queue, Snapshot
from shoal.core.sharing_mode import TIME_SLICING

if TYPE_CHECKING:
    from shoal.core.kept_pass import KeptPass
    from shoal.core.victims import Rank

# task states
PENDING = 0
ALLOCATED = 1
PIPELINED = 2
RUNNING = 3  # bound, binding or running (the cluster shows it on a node)
RELEASING = 4  # being deleted / evicted in this cycle
GATED = 5
ACTIVE = (ALLOCATED, PIPELINED, RUNNING)

_NAMESPACE = attrgetter("namespace")
_NAME = attrgetter("name")
_NAMELESS = methodcaller("endswith", "/")
_is_none = partial(is_, None)


def _marked_and_semi(groups: Sequence[PodGroup], first: Sequence[Pod | None]) -> tuple[set[int], set[int]]:
    """Of the PodGroups with live pods: those `Session._read_up_front` looks at (subgroups, a gang minimum, a
    stale stamp, a condition, bind failures), and the semi-preemptible ones (their core is counted after)."""
    marked: set[int] = set()
    semi: set[int] = set()
    for gi in compress(range(len(groups)), first):  # a Pod is truthy, None is not
        group = groups[gi]
        if (group.subgroups or group.min_member > 1 or group.stale_timestamp or group.condition_reason
                or group.bind_failures):
            marked.add(gi)
        if group.preemptibility == model.SEMI_PREEMPTIBLE:
            semi.add(gi)
    return marked, semi


GPU_MEMORY_PLACEHOLDER_MIB = 100  # KAI's value when nvidia.com/gpu.memory is missing
DEVICE_MILLI = 1000


def epoch_of(value: str | int | float) -> float:
    """A sortable number for a creation/now value given as epoch seconds or RFC3339 text."""
    if isinstance(value, (int, float)):
        return float(value)
    if not value:
        return 0.0
    return _epoch_of_text(value)


@lru_cache(maxsize=1 << 18)  # a cache smaller than the cluster's distinct creation times misses on every look-up
def _epoch_of_text(value: str) -> float:  # creation times repeat across cycles: parse each once
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    return datetime.fromisoformat(text).timestamp()


class GpuGroup:
    """A shared GPU on a node: `used` milli-device (releasing pods included), `releasing` of it."""

    __slots__ = ("id", "used", "releasing", "members", "active_members", "new", "index", "pipelined", "mode")

    def __init__(self, gid: str, index: int, new: bool = False) -> None:
        self.id = gid
        self.used = 0
        self.releasing = 0
        self.members = 0
        self.active_members = 0
        self.new = new
        self.index = index
        self.pipelined = False  # opened by a pipelined placement: whoever joins it is pipelined too
        self.mode: str | None = None  # compute mode of its pods (KAI v0.18); None reads as time-slicing

    def copy(self) -> GpuGroup:
        other = GpuGroup(self.id, self.index, self.new)
        other.used, other.releasing, other.members = self.used, self.releasing, self.members
        other.active_members, other.pipelined, other.mode = self.active_members, self.pipelined, self.mode
        return other


class NodeState:
    __slots__ = (
        "index",
        "node",
        "name",
        "gpu_mem",
        "idle_cpu",
        "idle_mem",
        "idle_gpus",
        "idle_pods",
        "rel_cpu",
        "rel_mem",
        "rel_gpus",
        "rel_pods",
        "groups",
    )

    def __init__(self, index: int, node: Node) -> None:
        self.index = index
        self.node = node
        self.name = node.name
        self.gpu_mem = node.gpu_memory_mib
        self.idle_cpu = node.cpu_milli
        self.idle_mem = node.memory_bytes
        self.idle_gpus = node.gpus
        self.idle_pods = node.pods
        self.rel_cpu = 0
        self.rel_mem = 0
        self.rel_gpus = 0
        self.rel_pods = 0
        self.groups: dict[str, GpuGroup] = {}


class Task:
    __slots__ = (
        "pod",
        "job",
        "key",
        "status",
        "node",
        "groups",
        "cpu",
        "mem",
        "gpus",
        "frac_milli",
        "frac_mem",
        "devices",
        "gpu_fair",
        "gpu_limit",
        "subgroup",
        "order",
        "leaf",
        "compute_mode",
    )

    def __init__(self, pod: Pod, job: Job | None) -> None:
        self.pod = pod
        self.job = job
        self.key = f"{pod.namespace}/{pod.name}"
        self.status = PENDING
        self.node: NodeState | None = None
        self.groups: tuple[str, ...] = ()
        self.cpu = pod.cpu_milli
        self.mem = pod.memory_bytes
        g = self.gpus = pod.gpus
        frac = pod.fraction
        if frac is None:
            self.frac_milli = self.frac_mem = None
            self.devices = 0
        else:
            self.frac_milli = frac.portion_milli
            self.frac_mem = frac.gpu_memory_mib
            self.devices = frac.num_devices
        self.gpu_fair = self.gpu_limit = g * DEVICE_MILLI  # queue accounting: fair share / limit checks
        self.subgroup = pod.subgroup
        self.order: tuple = ()
        self.leaf: SubGroupNode | None = None  # the leaf (sub)group holding this task
        self.compute_mode = pod.compute_mode or TIME_SLICING  # a shared GPU holds pods of one mode only

    @property
    def is_fraction(self) -> bool:
        return self.devices > 0

    def device_milli(self, node: NodeState) -> int | None:
        """Milli-device this fraction takes on each of its devices on `node` (None: memory not synced)."""
        if self.frac_milli is not None:
            return self.frac_milli
        if node.gpu_mem is None or self.frac_mem is None:
            return None
        return -(-self.frac_mem * DEVICE_MILLI // node.gpu_mem)

    def queue_vector(self) -> tuple[int, int, int]:
        return (self.cpu, self.mem, self.gpu_fair)


class SubGroupNode:
    """One level of a job's gang tree: the root (name "") or a PodGroup subgroup."""

    __slots__ = ("name", "min_member", "min_subgroup", "children", "tasks", "active")

    def __init__(self, name: str, min_member: int | None, min_subgroup: int | None) -> None:
        self.name = name
        self.min_member = min_member
        self.min_subgroup = min_subgroup
        self.children: list[SubGroupNode] = []
        self.tasks: list[Task] = []
        self.active = 0  # leaves: tasks allocated, pipelined or running (kept by the statement)

    @property
    def is_leaf(self) -> bool:
        return not self.children


class Job:
    __slots__ = (
        "group",
        "key",
        "queue",
        "priority",
        "preemptible",
        "tasks",
        "root",
        "created",
        "error",
        "allocated_at_start",
        "position",
        "semi",
        "core_np",
    )

    def __init__(self, group: PodGroup, priority: int, preemptible: bool) -> None:
        self.group = group
        self.key = group.key
        self.queue = group.queue
        self.priority = priority
        self.preemptible = preemptible
        # semi-preemptible: preemptible above its gang minimum only (semipreemptible.py)
        self.semi = group.preemptibility == model.SEMI_PREEMPTIBLE
        self.core_np = (0, 0, 0)  # the core's resources last counted as non-preemptible in its queue
        self.tasks: list[Task] = []
        mm = group.min_member
        self.root = SubGroupNode("", mm if mm > 0 else 0, group.min_subgroup)
        c = group.created
        self.created = float(c) if type(c) is int else epoch_of(c)
        self.error: str | None = None
        self.allocated_at_start = 0
        self.position = -1  # the PodGroup's position in snapshot.pod_groups (set by the session)

    def active_count(self) -> int:
        return sum(1 for t in self.tasks if t.status in ACTIVE)

    def pending_tasks(self) -> list[Task]:
        return [t for t in self.tasks if t.status == PENDING]


class QueueState:
    __slots__ = ("queue", "name", "parent", "children", "chain", "alloc", "alloc_np", "request", "created")

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.name = queue.name
        self.parent: QueueState | None = None
        self.children: list[QueueState] = []
        self.chain: list[QueueState] = []  # self, parent, ..., root
        self.alloc = [0, 0, 0]
        self.alloc_np = [0, 0, 0]
        self.request = [0, 0, 0]
        self.created = epoch_of(queue.created)

    @property
    def is_leaf(self) -> bool:
        return not self.children


def _leaf_for(root: SubGroupNode, name: str | None) -> SubGroupNode:
    """The leaf (sub)group a task naming `name` belongs to; an unknown name goes to the first leaf."""
    if not root.children:
        return root
    stack = [root]
    while stack:
        n = stack.pop()
        if n.name == name and n.is_leaf:
            return n
        stack.extend(n.children)
    n = root
    while n.children:
        n = n.children[0]
    return n


def occupy_node(node: NodeState, pod: Pod, res_ns: str, releasing: bool = False) -> None:
    """Count a pod on its node (releasing: its room is being freed); a shared GPU group is made on first use."""
    releasing = releasing or pod.deleting
    if releasing:
        node.rel_cpu += pod.cpu_milli
        node.rel_mem += pod.memory_bytes
        node.rel_pods += 1
    node.idle_cpu -= pod.cpu_milli
    node.idle_mem -= pod.memory_bytes
    node.idle_pods -= 1
    if pod.gpu_groups:
        is_reservation = pod.namespace == res_ns
        frac = pod.fraction
        share = 0
        if not is_reservation and frac is not None:
            if frac.portion_milli is not None:
                share = frac.portion_milli
            else:
                mem = node.gpu_mem or GPU_MEMORY_PLACEHOLDER_MIB
                share = -(-(frac.gpu_memory_mib or 0) * DEVICE_MILLI // mem)
        for gid in pod.gpu_groups:
            g = node.groups.get(gid)
            if g is None:
                g = GpuGroup(gid, len(node.groups))
                node.groups[gid] = g
                node.idle_gpus -= 1
            if is_reservation:
                if pod.compute_mode:  # the reservation pod's mode is the group's (binder writes it)
                    g.mode = pod.compute_mode
                continue
            if g.mode is None:
                g.mode = pod.compute_mode or TIME_SLICING
            g.used += share
            g.members += 1
            if releasing:
                g.releasing += share
            else:
                g.active_members += 1
        return
    if pod.gpus:
        node.idle_gpus -= pod.gpus
        if releasing:
            node.rel_gpus += pod.gpus


class JobIndex(Mapping[str, Job]):
    """The cycle's jobs by "ns/name", each made (Job, subgroup tree, Tasks) the first time it is asked for.

    The session's one pass over the pods records where each PodGroup's pods are; it makes up front only
    the jobs something reads: those with a pending or gated pod, subgroups, a condition to clear, a stale
    stamp, or a gang below its minimum. The others (at 140k pods, nearly all: running, at or above their
    minimum) count through the node and queue sums of that pass until an eviction action reaches one as
    a victim. A job made late is exactly the job an eager build makes: nothing changed it before.
    Iterating (`values()`, `items()`) makes every job, for tests and tools.
    """

    def __init__(self, session: Session, groups: tuple[PodGroup, ...], keys: Sequence[str] | None = None) -> None:
        self.session = session
        self.groups = groups
        # PodGroup key -> position in snapshot.pod_groups (the last of duplicates, like a dict; a pod without
        # a PodGroup names "", so no PodGroup is found by "ns/"): by "ns/name" when the caller has the keys
        # in order (a kept pass), else by namespace, then name (read from the groups, no key built)
        self.flat: dict[str, int] | None = None
        self.nested: dict[str, dict[str, int]] | None = None
        if keys is not None:
            self.flat = dict(zip(keys, range(len(groups)), strict=True))
            for key in filter(_NAMELESS, keys):
                self.flat.pop(key, None)
            self.count = len(self.flat)
        else:
            self.count = sum(map(len, self.by_namespace().values()))
        self.first: list[Pod | None] = [None] * len(groups)  # the group's first pod (snapshot order)
        self.more: dict[int, list[Pod]] = {}  # its further pods
        self.members: Mapping[str, list[Pod]] | None = None  # instead: "ns/name" → its pods (a kept pass)
        self.made: dict[int, Job] = {}  # group position -> job, in the order they were made

    def by_namespace(self) -> dict[str, dict[str, int]]:
        """namespace -> PodGroup name -> position (built on first use when the index is by key)."""
        if self.nested is None:
            groups = self.groups
            self.nested = {}
            namespaces = list(map(_NAMESPACE, groups))
            names = list(map(_NAME, groups))
            start = 0
            for namespace, run in groupby(namespaces):  # snapshots are sorted by namespace: one run each
                end = start + len(list(run))
                by_name = self.nested.get(namespace)
                if by_name is None:
                    by_name = self.nested[namespace] = {}
                by_name.update(zip(names[start:end], range(start, end), strict=True))
                by_name.pop("", None)
                start = end
        return self.nested

    def position(self, key: str) -> int | None:
        if self.flat is not None:
            return self.flat.get(key)
        namespace, _, name = key.partition("/")
        by_name = self.by_namespace().get(namespace)
        return by_name.get(name) if by_name is not None else None

    def positions(self) -> Iterable[int]:
        """Every live PodGroup's position (a duplicate's earlier copies are not)."""
        if self.flat is not None:
            return self.flat.values()
        return (gi for by_name in self.by_namespace().values() for gi in by_name.values())

    def job_at(self, position: int) -> Job:
        job = self.made.get(position)
        if job is None:
            job = self.made[position] = self.session._make_job(position)
        return job

    def made_jobs(self) -> list[Job]:
        return list(self.made.values())

    def pods_of(self, position: int) -> list[Pod]:
        """The PodGroup's pods that count this cycle (not finished, on no node or a node of the shard)."""
        if self.members is not None:
            return list(self.members.get(self.groups[position].key, ()))
        first = self.first[position]
        if first is None:
            return []
        return [first, *self.more.get(position, ())]

    def __getitem__(self, key: str) -> Job:
        position = self.position(key)
        if position is None:
            raise KeyError(key)
        return self.job_at(position)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.position(key) is not None

    def __iter__(self) -> Iterator[str]:
        if self.flat is not None:
            return iter(self.flat)
        return (f"{namespace}/{name}" for namespace, by_name in self.by_namespace().items() for name in by_name)

    def __len__(self) -> int:
        return self.count


class Session:
    """Everything the actions read and the statement mutates during one cycle.

    `eager_jobs=True` makes every job during the build (the reference the lazy build is tested against).
    `kept`: the pod pass of the previous cycles (`kept_pass.KeptPass`), brought up to date instead of a
    pass over every pod; the session it fills equals the one this pass builds.
    """

    def __init__(self, snapshot: Snapshot, *, eager_jobs: bool = False, kept: KeptPass | None = None) -> None:
        self.snapshot = snapshot
        self.config = snapshot.config
        self.now = epoch_of(snapshot.now)
        self.nodes: list[NodeState] = [NodeState(i, n) for i, n in enumerate(snapshot.nodes)]
        self.node_by_name = {ns.name: ns for ns in self.nodes}
        mems = [n.gpu_memory_mib for n in snapshot.nodes if n.gpu_memory_mib]
        self.min_gpu_mem = min(mems) if mems else GPU_MEMORY_PLACEHOLDER_MIB
        self.max_gpu_mem = max(mems) if mems else GPU_MEMORY_PLACEHOLDER_MIB
        self.queues: dict[str, QueueState] = {}
        self.orphan_pods: list[Pod] = []  # pending pods with no PodGroup
        self.dirty: list[int] = []  # indices of nodes changed by the statement, in order (node index)
        self.pending_jobs: list[Job] = []  # jobs with a pending or gated task, by key
        # running pods of each preemptible job a victim search may take, by the job's position (VictimPool)
        self.running_preemptible: Mapping[int, int] = {}
        # their rank as victims (victims.build_rank) where a kept pass has it; the pool builds the others
        self.victim_ranks: Mapping[int, Rank] = {}
        self.semi_positions: list[int] = []  # semi-preemptible PodGroups (their jobs are made up front)
        self.stale_cores: list[str] = []
        self.cores_counted = False  # semipreemptible.count_cores ran (the first Context on this session)
        self.background: list[tuple[NodeState, Pod]] = []  # background pods planned as if absent
        classes = {c.name: c for c in snapshot.priority_classes}
        default = model.global_default_priority(classes)
        self._priorities = {name: pc.value for name, pc in classes.items()}
        self._default_priority = default if default is not None else model.DEFAULT_PRIORITY
        self._build_queues(snapshot.queues)
        # own (not rolled-up) figures per queue: [request, allocated, allocated non-preemptible]
        self.own: dict[str, list[list[int]]] = {n: [[0, 0, 0], [0, 0, 0], [0, 0, 0]] for n in self.queues}
        kept = None if eager_jobs else kept
        keys = kept.group_keys(snapshot.pod_groups) if kept is not None else None
        self.jobs = JobIndex(self, snapshot.pod_groups, keys)
        if kept is None or not kept.fill(self):
            self._place_pods(snapshot, eager_jobs)

    # ---- build ---------------------------------------------------------------------------------
    def _build_queues(self, queues: tuple[Queue, ...]) -> None:
        for q in queues:
            self.queues[q.name] = QueueState(q)
        for qs in self.queues.values():
            parent = qs.queue.parent
            if parent:
                ps = self.queues.get(parent)
                if ps is not None:
                    qs.parent = ps
                    ps.children.append(qs)
        for qs in self.queues.values():
            chain: list[QueueState] = []
            seen: set[str] = set()
            cur: QueueState | None = qs
            while cur is not None and cur.name not in seen:
                seen.add(cur.name)
                chain.append(cur)
                cur = cur.parent
            qs.chain = chain

    def priority_of(self, group: PodGroup) -> tuple[int, bool]:
        """(priority, preemptible) of a PodGroup (§1.4, §4.8)."""
        prio = group.priority
        if prio is None:
            prio = self._priorities.get(group.priority_class_name, self._default_priority)
        pre = group.preemptibility
        return prio, (prio < model.NON_PREEMPTIBLE_PRIORITY if not pre else pre != model.NON_PREEMPTIBLE)

    def gpu_fair_of(self, pod: Pod) -> int:
        """The milli-GPUs a pod counts for in its queue's fair-share figures."""
        frac = pod.fraction
        if frac is not None:
            if frac.gpu_memory_mib is not None:
                return -(-frac.gpu_memory_mib * DEVICE_MILLI // self.min_gpu_mem) * frac.num_devices
            if frac.portion_milli is not None:
                return frac.portion_milli * frac.num_devices
        return pod.gpus * DEVICE_MILLI

    def _place_pods(self, snapshot: Snapshot, eager_jobs: bool) -> None:
        """One pass over the pods: node occupancy, own per-queue figures, where each job's pods are.

        The loop runs once per pod (140k at 4,000 nodes), so its common case (a running pod holding
        whole resources) is written out with local names only.
        """
        index = self.jobs
        groups = snapshot.pod_groups
        by_namespace = index.by_namespace()
        first, more = index.first, index.more
        find_node = self.node_by_name.get
        find_own = self.own.get
        occupy = occupy_node
        priorities, default_priority = self._priorities, self._default_priority
        np_priority = model.NON_PREEMPTIBLE_PRIORITY
        candidates: list[int] = []  # a job's position per running pod a victim search may take
        res_ns = self.config.reservation_namespace
        pending: set[int] = set()  # jobs made up front: a pending pod, or a pod no eviction may take (PDB)
        background = self.background
        done = (model.PHASE_SUCCEEDED, model.PHASE_FAILED)
        last_namespace = None
        by_name: dict[str, int] = {}
        for pod in snapshot.pods:
            if pod.phase in done:
                continue
            node_name = pod.node_name
            if node_name:
                node = find_node(node_name)
                if node is None:
                    continue  # on a node outside this shard / gone
            else:
                node = None
            namespace = pod.namespace
            if namespace != last_namespace:
                by_name = by_namespace.get(namespace) or {}
                last_namespace = namespace
            gi = by_name.get(pod.pod_group)
            if gi is None:
                if node is not None:
                    occupy(node, pod, res_ns)
                elif pod.managed:
                    self.orphan_pods.append(pod)
                continue
            if first[gi] is None:
                first[gi] = pod
            else:
                more.setdefault(gi, []).append(pod)
            group = groups[gi]
            if node is None:
                pending.add(gi)
                if not pod.gated:
                    self._requested(group.queue, pod)
                continue
            if pod.background and not pod.deleting and not pod.eviction_blocked:
                occupy(node, pod, res_ns, releasing=True)
                background.append((node, pod))
                continue  # planned as if absent: its room is releasing, it counts in no queue
            if pod.deleting or pod.gpu_groups:
                occupy(node, pod, res_ns)
                if pod.deleting:
                    continue  # releasing: counts on its node, not in its queue
            else:  # the common case: a running pod holding whole resources
                node.idle_cpu -= pod.cpu_milli
                node.idle_mem -= pod.memory_bytes
                node.idle_pods -= 1
                node.idle_gpus -= pod.gpus
            pre = group.preemptibility
            if pre:
                preemptible = pre != "non-preemptible"
            else:
                prio = group.priority
                if prio is None:
                    prio = priorities.get(group.priority_class_name, default_priority)
                preemptible = prio < np_priority
            if preemptible:
                if pod.eviction_blocked:
                    pending.add(gi)
                else:
                    candidates.append(gi)
            acc = find_own(group.queue)
            if acc is not None:
                c, m = pod.cpu_milli, pod.memory_bytes
                gf = pod.gpus * DEVICE_MILLI if pod.fraction is None else self.gpu_fair_of(pod)
                alloc = acc[1]
                alloc[0] += c
                alloc[1] += m
                alloc[2] += gf
                if not preemptible:
                    np = acc[2]
                    np[0] += c
                    np[1] += m
                    np[2] += gf
        self.running_preemptible = Counter(candidates)
        unpodded = list(compress(range(len(groups)), map(_is_none, first)))
        self.finish(pending, *_marked_and_semi(groups, first), unpodded, eager_jobs)

    def _requested(self, queue: str, pod: Pod) -> None:
        """A pending pod's request counts in its queue's own figures."""
        acc = self.own.get(queue)
        if acc is not None:
            req = acc[0]
            req[0] += pod.cpu_milli
            req[1] += pod.memory_bytes
            req[2] += self.gpu_fair_of(pod)

    def finish(self, pending: set[int], marked: set[int], semi: set[int], unpodded: list[int],
               eager_jobs: bool) -> None:
        """After the pod pass: queue figures rolled up, the jobs made up front. `pending`, `marked`, `semi`:
        the positions the pass found (see `_place_pods`); `unpodded`: PodGroups without live pods."""
        index, groups = self.jobs, self.jobs.groups
        for name, (req, alloc, np) in self.own.items():
            req[0] += alloc[0]  # a running pod is requested and allocated
            req[1] += alloc[1]
            req[2] += alloc[2]
            for qs in self.queues[name].chain:
                for mine, theirs in ((qs.request, req), (qs.alloc, alloc), (qs.alloc_np, np)):
                    mine[0] += theirs[0]
                    mine[1] += theirs[1]
                    mine[2] += theirs[2]
        if index.count != len(groups):  # duplicates: only the surviving (last) PodGroup of a key counts
            semi &= set(index.positions())
        self.semi_positions = sorted(semi)
        # PodGroups without live pods that still show core pods: their corePods are cleared
        self.stale_cores = sorted(groups[gi].key for gi in unpodded if groups[gi].core_pods)
        up_front = index.positions() if eager_jobs else self._read_up_front(groups, pending | semi, marked, unpodded)
        for gi in sorted(up_front):
            index.job_at(gi)
        made = index.made
        self.pending_jobs = sorted((made[gi] for gi in pending), key=lambda j: j.key)

    def _read_up_front(self, groups: tuple[PodGroup, ...], pending: set[int], marked: set[int],
                       unpodded: list[int]) -> set[int]:
        """Positions of the jobs made during the build (see JobIndex)."""
        index = self.jobs
        out = set(pending)
        for gi in marked:
            g = groups[gi]
            if g.subgroups or g.stale_timestamp or g.condition_reason or g.bind_failures:
                out.add(gi)
                continue
            on_node = sum(1 for pod in index.pods_of(gi) if pod.node_name)
            if 0 < on_node < g.min_member:  # a gang below its minimum: stale gang eviction reads it
                out.add(gi)
        # a PodGroup without live pods still has its stale stamp cleared (and a condition is harmless)
        for gi in unpodded:
            g = groups[gi]
            if g.stale_timestamp or g.condition_reason or g.subgroups:
                out.add(gi)
        if index.count != len(groups):  # duplicates: only the surviving (last) PodGroup of a key counts
            out &= set(index.positions())
        return out

    def _make_job(self, gi: int) -> Job:
        g = self.jobs.groups[gi]
        prio, preemptible = self.priority_of(g)
        job = Job(g, prio, preemptible)
        job.position = gi
        root = job.root
        if g.subgroups:
            nodes = {s.name: SubGroupNode(s.name, s.min_member, s.min_subgroup) for s in g.subgroups}
            for s in g.subgroups:
                parent = nodes.get(s.parent) if s.parent else None
                (parent or root).children.append(nodes[s.name])
            for n in (root, *nodes.values()):
                n.children.sort(key=lambda c: c.name)
        find_node = self.node_by_name.get
        for pod in self.jobs.pods_of(gi):
            task = Task(pod, job)
            if pod.fraction is not None:
                if task.frac_mem is not None:
                    task.gpu_fair = -(-task.frac_mem * DEVICE_MILLI // self.min_gpu_mem) * task.devices
                    task.gpu_limit = -(-task.frac_mem * DEVICE_MILLI // self.max_gpu_mem) * task.devices
                elif task.frac_milli is not None:
                    task.gpu_fair = task.gpu_limit = task.frac_milli * task.devices
            job.tasks.append(task)
            leaf = _leaf_for(root, task.subgroup)
            leaf.tasks.append(task)
            task.leaf = leaf
            node_name = pod.node_name
            if not node_name:
                if pod.gated:
                    task.status = GATED
                continue
            task.node = find_node(node_name)
            task.groups = pod.gpu_groups
            if pod.deleting or (pod.background and not pod.eviction_blocked):
                task.status = RELEASING  # a background pod is planned as if it had gone
            else:
                task.status = RUNNING
                leaf.active += 1
                job.allocated_at_start += 1
        return job

    # ---- queue accounting ------------------------------------------------------------------------
    def account(self, task: Task, sign: int) -> None:
        """Add (sign=+1) or remove (-1) a task's resources to its queue chain's allocated figures."""
        job = task.job
        q = self.queues.get(job.queue) if job is not None else None
        if q is None or job is None:
            return
        c, m, g = task.cpu * sign, task.mem * sign, task.gpu_fair * sign
        np = not job.preemptible
        for qs in q.chain:
            a = qs.alloc
            a[0] += c
            a[1] += m
            a[2] += g
            if np:
                a = qs.alloc_np
                a[0] += c
                a[1] += m
                a[2] += g

    def total_capacity(self) -> tuple[int, int, int]:
        cpu = mem = gpu = 0
        for ns in self.nodes:
            if ns.node.ready:
                cpu += ns.node.cpu_milli
                mem += ns.node.memory_bytes
                gpu += ns.node.gpus * DEVICE_MILLI
        return (cpu, mem, gpu)

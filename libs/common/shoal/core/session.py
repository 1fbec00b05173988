"""Mutable per-cycle state built from a Snapshot: nodes, shared GPU groups, jobs, tasks, queue accounting.

The state is private to one cycle; every change goes through `statement.Statement`, which keeps an undo
log. Units: cpu millicores, memory bytes, whole GPUs per node, shared-GPU use in milli-device
(a 0.5 fraction uses 500 of a group's 1000; a gpu-memory request uses ceil(mem * 1000 / node memory)).
Queue figures are [cpu_milli, memory_bytes, gpu_milli] lists, the order of `resources.RESOURCE_ORDER`.
"""

from __future__ import annotations

from datetime import datetime

from shoal.core import model
from shoal.core.model import Node, Pod, PodGroup, Queue, Snapshot

# task states
PENDING = 0
ALLOCATED = 1
PIPELINED = 2
RUNNING = 3  # bound, binding or running (the cluster shows it on a node)
RELEASING = 4  # being deleted / evicted in this cycle
GATED = 5
ACTIVE = (ALLOCATED, PIPELINED, RUNNING)

GPU_MEMORY_PLACEHOLDER_MIB = 100  # KAI's value when nvidia.com/gpu.memory is missing
DEVICE_MILLI = 1000


def epoch_of(value: str | int | float) -> float:
    """A sortable number for a creation/now value given as epoch seconds or RFC3339 text."""
    if isinstance(value, (int, float)):
        return float(value)
    if not value:
        return 0.0
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    return datetime.fromisoformat(text).timestamp()


class GpuGroup:
    """A shared GPU on a node: `used` milli-device (releasing pods included), `releasing` of it."""

    __slots__ = ("id", "used", "releasing", "members", "active_members", "new", "index", "pipelined")

    def __init__(self, gid: str, index: int, new: bool = False) -> None:
        self.id = gid
        self.used = 0
        self.releasing = 0
        self.members = 0
        self.active_members = 0
        self.new = new
        self.index = index
        self.pipelined = False  # opened by a pipelined placement: whoever joins it is pipelined too


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

    @property
    def is_fraction(self) -> bool:
        return self.devices > 0

    def device_milli(self, node: NodeState) -> int | None:
        """Milli-device this fraction takes on each of its devices on `node` (None: memory not synced)."""
        if self.frac_milli is not None:
            return self.frac_milli
        if node.gpu_mem is None:
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
    )

    def __init__(self, group: PodGroup, priority: int, preemptible: bool) -> None:
        self.group = group
        self.key = group.key
        self.queue = group.queue
        self.priority = priority
        self.preemptible = preemptible
        self.tasks: list[Task] = []
        mm = group.min_member
        self.root = SubGroupNode("", mm if mm > 0 else 0, group.min_subgroup)
        c = group.created
        self.created = float(c) if type(c) is int else epoch_of(c)
        self.error: str | None = None
        self.allocated_at_start = 0

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


class Session:
    """Everything the actions read and the statement mutates during one cycle."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.config = snapshot.config
        self.now = epoch_of(snapshot.now)
        self.nodes: list[NodeState] = [NodeState(i, n) for i, n in enumerate(snapshot.nodes)]
        self.node_by_name = {ns.name: ns for ns in self.nodes}
        mems = [n.gpu_memory_mib for n in snapshot.nodes if n.gpu_memory_mib]
        self.min_gpu_mem = min(mems) if mems else GPU_MEMORY_PLACEHOLDER_MIB
        self.max_gpu_mem = max(mems) if mems else GPU_MEMORY_PLACEHOLDER_MIB
        self.queues: dict[str, QueueState] = {}
        self.jobs: dict[str, Job] = {}
        self.orphan_pods: list[Pod] = []  # pending pods with no PodGroup
        self.dirty: list[int] = []  # indices of nodes changed by the statement, in order (node index)
        self.pending_jobs: list[Job] = []  # jobs with a pending or gated task, by key
        self._build_queues(snapshot.queues)
        # own (not rolled-up) figures per queue: [request, allocated, allocated non-preemptible]
        self.own: dict[str, list[list[int]]] = {n: [[0, 0, 0], [0, 0, 0], [0, 0, 0]] for n in self.queues}
        self._build_jobs(snapshot)
        self._place_pods(snapshot)

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
            chain, seen, cur = [], set(), qs
            while cur is not None and cur.name not in seen:
                seen.add(cur.name)
                chain.append(cur)
                cur = cur.parent
            qs.chain = chain

    def _build_jobs(self, snapshot: Snapshot) -> None:
        classes = {c.name: c for c in snapshot.priority_classes}
        default = model.global_default_priority(classes)
        values = {name: pc.value for name, pc in classes.items()}
        fallback = default if default is not None else model.DEFAULT_PRIORITY
        jobs = self.jobs
        for g in snapshot.pod_groups:
            prio = g.priority
            if prio is None:
                prio = values.get(g.priority_class_name, fallback)
            pre = g.preemptibility
            preemptible = prio < model.NON_PREEMPTIBLE_PRIORITY if not pre else pre == "preemptible"
            job = Job(g, prio, preemptible)
            if g.subgroups:
                nodes = {s.name: SubGroupNode(s.name, s.min_member, s.min_subgroup) for s in g.subgroups}
                for s in g.subgroups:
                    parent = nodes.get(s.parent) if s.parent else None
                    (parent or job.root).children.append(nodes[s.name])
                for n in (job.root, *nodes.values()):
                    n.children.sort(key=lambda c: c.name)
            jobs[job.key] = job

    def _place_pods(self, snapshot: Snapshot) -> None:
        """One pass over the pods: tasks, node occupancy, own per-queue request/allocated figures."""
        jobs = self.jobs
        nodes = self.node_by_name
        res_ns = self.config.reservation_namespace
        min_mem = self.min_gpu_mem
        max_mem = self.max_gpu_mem
        own = self.own
        pending_jobs: dict[str, Job] = {}
        done = (model.PHASE_SUCCEEDED, model.PHASE_FAILED)
        for pod in snapshot.pods:
            if pod.phase in done:
                continue
            pg = pod.pod_group
            job = jobs.get(f"{pod.namespace}/{pg}") if pg else None
            node_name = pod.node_name
            node = nodes.get(node_name) if node_name else None
            if node_name and node is None:
                continue  # on a node outside this shard / gone
            task = None
            if job is not None:
                task = Task(pod, job)
                if pod.fraction is not None:
                    if task.frac_mem is not None:
                        task.gpu_fair = -(-task.frac_mem * DEVICE_MILLI // min_mem) * task.devices
                        task.gpu_limit = -(-task.frac_mem * DEVICE_MILLI // max_mem) * task.devices
                    elif task.frac_milli is not None:
                        task.gpu_fair = task.gpu_limit = task.frac_milli * task.devices
                job.tasks.append(task)
                root = job.root
                if root.children:
                    self._attach(job, task)
                else:
                    root.tasks.append(task)
                    task.leaf = root
            if node is None:
                if task is None:
                    if pod.managed:
                        self.orphan_pods.append(pod)
                    continue
                if pod.gated:
                    task.status = GATED
                pending_jobs[job.key] = job
                acc = own.get(job.queue)
                if acc is not None and not pod.gated:
                    req = acc[0]
                    req[0] += task.cpu
                    req[1] += task.mem
                    req[2] += task.gpu_fair
                continue
            if pod.deleting or pod.gpu_groups:
                self._occupy(node, pod, task, res_ns)
            else:  # the common case, inlined: a running pod holding whole resources
                if task is not None:
                    task.node = node
                    task.status = RUNNING
                node.idle_cpu -= pod.cpu_milli
                node.idle_mem -= pod.memory_bytes
                node.idle_pods -= 1
                node.idle_gpus -= pod.gpus
            if task is not None and task.status == RUNNING:
                task.leaf.active += 1
                job.allocated_at_start += 1
                acc = own.get(job.queue)
                if acc is not None:
                    c, m, gf = task.cpu, task.mem, task.gpu_fair
                    req, alloc, np = acc
                    req[0] += c
                    req[1] += m
                    req[2] += gf
                    alloc[0] += c
                    alloc[1] += m
                    alloc[2] += gf
                    if not job.preemptible:
                        np[0] += c
                        np[1] += m
                        np[2] += gf
        self.pending_jobs = sorted(pending_jobs.values(), key=lambda j: j.key)
        for name, (req, alloc, np) in own.items():
            for qs in self.queues[name].chain:
                for mine, theirs in ((qs.request, req), (qs.alloc, alloc), (qs.alloc_np, np)):
                    mine[0] += theirs[0]
                    mine[1] += theirs[1]
                    mine[2] += theirs[2]

    def _attach(self, job: Job, task: Task) -> None:
        root = job.root
        if not root.children:
            root.tasks.append(task)
            return
        name = task.subgroup
        stack = [root]
        while stack:
            n = stack.pop()
            if n.name == name and n.is_leaf:
                n.tasks.append(task)
                task.leaf = n
                return
            stack.extend(n.children)
        # a pod naming no known leaf subgroup goes to the first leaf (deterministic)
        n = root
        while n.children:
            n = n.children[0]
        n.tasks.append(task)
        task.leaf = n

    def _occupy(self, node: NodeState, pod: Pod, task: Task | None, res_ns: str) -> None:
        releasing = pod.deleting
        if task is not None:
            task.node = node
            task.groups = pod.gpu_groups
            task.status = RELEASING if releasing else RUNNING
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
                    continue
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

    # ---- queue accounting ------------------------------------------------------------------------
    def account(self, task: Task, sign: int) -> None:
        """Add (sign=+1) or remove (-1) a task's resources to its queue chain's allocated figures."""
        job = task.job
        q = self.queues.get(job.queue) if job is not None else None
        if q is None:
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

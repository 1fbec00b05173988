"""Reversible simulation over a Session: allocate / pipeline / evict with checkpoint, rollback and commit.

Every mutation appends an undo record; `rollback(cp)` undoes records newest first back to `cp`, so
nothing of a rejected scenario leaks. `commit()` accepts everything since the last commit and returns
those records (the actions turn them into plan operations). Core II (reclaim, preempt, consolidation)
reuses the same statement: evict victims, pipeline the preemptor and the re-placed victims, validate,
then commit or roll back.

Resource taking rule: an allocation takes from the node's idle resources; a pipelined one takes from
releasing resources first and the rest from idle, so idle never double-promises what a pipelined pod
counts on. A fraction placed on an existing shared GPU takes the group's free portion first and then
its releasing portion.
"""

from __future__ import annotations

from shoal.core.session import (
    ACTIVE,
    ALLOCATED,
    DEVICE_MILLI,
    PIPELINED,
    RELEASING,
    RUNNING,
    GpuGroup,
    NodeState,
    Session,
    Task,
)


class GroupPick:
    """One device of a fraction placement: an existing group, or a new group on a whole GPU."""

    __slots__ = ("group_id", "new", "from_releasing")

    def __init__(self, group_id: str, new: bool, from_releasing: bool) -> None:
        self.group_id = group_id
        self.new = new
        self.from_releasing = from_releasing

    def __repr__(self) -> str:
        return f"GroupPick({self.group_id!r}, new={self.new}, from_releasing={self.from_releasing})"


class Change:
    """An accepted or pending change: kind is "allocate", "pipeline" or "evict"."""

    __slots__ = ("kind", "task", "node", "groups", "new_groups", "undo", "action", "by", "message")

    def __init__(self, kind: str, task: Task, node: NodeState) -> None:
        self.kind = kind
        self.task = task
        self.node = node
        self.groups: tuple[str, ...] = ()
        self.new_groups: tuple[tuple[str, int], ...] = ()  # (group id, device ordinal) opened here
        self.undo: tuple = ()
        self.action = ""
        self.by = ""
        self.message = ""


def _take(idle: int, rel: int, need: int, pipelined: bool) -> tuple[int, int]:
    """Split `need` into (from_idle, from_releasing)."""
    if not pipelined:
        return need, 0
    r = min(need, max(rel, 0))
    return need - r, r


class Statement:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.log: list[Change] = []
        self.committed = 0
        self.fail_cache: dict[object, tuple[int, str]] = {}

    # ---- transaction control ---------------------------------------------------------------------
    def checkpoint(self) -> int:
        return len(self.log)

    def rollback(self, cp: int) -> None:
        if cp < self.committed:
            raise ValueError("cannot roll back past a commit")
        log = self.log
        while len(log) > cp:
            op = log.pop()
            if op.kind == "evict":
                self._undo_evict(op)
            elif op.kind == "convert":
                op.task.status = ALLOCATED
                op.undo[0].kind = "allocate"
                for gid, _index in op.undo[0].new_groups:
                    op.node.groups[gid].pipelined = False
                self.session.dirty.append(op.node.index)
            else:
                self._undo_allocate(op)
        if self.fail_cache:
            self.fail_cache = {k: v for k, v in self.fail_cache.items() if v[0] <= cp}

    def commit(self) -> list[Change]:
        ops = self.log[self.committed :]
        self.committed = len(self.log)
        return ops

    def pending_ops(self) -> list[Change]:
        return self.log[self.committed :]

    # ---- failure memo (valid while resources only shrink) ---------------------------------------------
    def remember_failure(self, signature: object, fit_error: str) -> None:
        self.fail_cache[signature] = (len(self.log), fit_error)

    def known_failure(self, signature: object) -> str | None:
        hit = self.fail_cache.get(signature)
        return hit[1] if hit is not None else None

    # ---- allocate / pipeline -----------------------------------------------------------------------
    def allocate(self, task: Task, node: NodeState, picks: list[GroupPick] | tuple = ()) -> Change:
        return self._place(task, node, picks, pipelined=False)

    def pipeline(self, task: Task, node: NodeState, picks: list[GroupPick] | tuple = ()) -> Change:
        return self._place(task, node, picks, pipelined=True)

    def _place(self, task: Task, node: NodeState, picks, pipelined: bool) -> Change:
        op = Change("pipeline" if pipelined else "allocate", task, node)
        prev = (task.status, task.node, task.groups)  # a re-placed victim goes back to releasing on undo
        new_count = sum(1 for p in picks if p.new)
        ci, cr = _take(node.idle_cpu, node.rel_cpu, task.cpu, pipelined)
        mi, mr = _take(node.idle_mem, node.rel_mem, task.mem, pipelined)
        pi, pr = _take(node.idle_pods, node.rel_pods, 1 + new_count, pipelined)
        gi, gr = _take(node.idle_gpus, node.rel_gpus, task.gpus, pipelined)
        node.idle_cpu -= ci
        node.rel_cpu -= cr
        node.idle_mem -= mi
        node.rel_mem -= mr
        node.idle_pods -= pi
        node.rel_pods -= pr
        node.idle_gpus -= gi
        node.rel_gpus -= gr
        group_undo = []
        new_groups = []
        if picks:
            share = task.device_milli(node) or 0
            for p in picks:
                if p.new:
                    if p.from_releasing:
                        node.rel_gpus -= 1
                    else:
                        node.idle_gpus -= 1
                    g = GpuGroup(p.group_id, len(node.groups), new=True)
                    g.pipelined = pipelined
                    g.mode = task.compute_mode
                    node.groups[p.group_id] = g
                    g.used = share
                    g.members = 1
                    g.active_members = 1
                    new_groups.append((p.group_id, g.index))
                    group_undo.append((g, True, share, 0, p.from_releasing))
                else:
                    g = node.groups[p.group_id]
                    free = DEVICE_MILLI - g.used
                    take_idle = min(share, max(free, 0)) if pipelined else share
                    take_rel = share - take_idle
                    g.used += take_idle
                    g.releasing -= take_rel
                    g.members += 1
                    g.active_members += 1
                    group_undo.append((g, False, take_idle, take_rel, False))
        if prev[0] not in ACTIVE and task.leaf is not None:
            task.leaf.active += 1
        task.status = PIPELINED if pipelined else ALLOCATED
        task.node = node
        task.groups = tuple(p.group_id for p in picks)
        op.groups = task.groups
        op.new_groups = tuple(new_groups)
        op.undo = (ci, cr, mi, mr, pi, pr, gi, gr, tuple(group_undo), prev)
        self.session.account(task, +1)
        self.session.dirty.append(node.index)
        self.log.append(op)
        return op

    def _undo_allocate(self, op: Change) -> None:
        task, node = op.task, op.node
        ci, cr, mi, mr, pi, pr, gi, gr, group_undo, prev = op.undo
        node.idle_cpu += ci
        node.rel_cpu += cr
        node.idle_mem += mi
        node.rel_mem += mr
        node.idle_pods += pi
        node.rel_pods += pr
        node.idle_gpus += gi
        node.rel_gpus += gr
        for g, new, take_idle, take_rel, from_rel in reversed(group_undo):
            if new:
                del node.groups[g.id]
                if from_rel:
                    node.rel_gpus += 1
                else:
                    node.idle_gpus += 1
            else:
                g.used -= take_idle
                g.releasing += take_rel
                g.members -= 1
                g.active_members -= 1
        self.session.account(task, -1)
        if prev[0] not in ACTIVE and task.leaf is not None:
            task.leaf.active -= 1
        task.status, task.node, task.groups = prev
        self.session.dirty.append(node.index)

    # ---- evict ---------------------------------------------------------------------------------------
    def evict(self, task: Task, action: str = "", by: str = "", message: str = "") -> Change:
        """A running task starts releasing: its resources become the node's releasing resources."""
        if task.status != RUNNING or task.node is None:
            raise ValueError(f"only running tasks can be evicted: {task.key}")
        node = task.node
        op = Change("evict", task, node)
        op.action, op.by, op.message = action, by, message
        node.rel_cpu += task.cpu
        node.rel_mem += task.mem
        node.rel_pods += 1
        node.rel_gpus += task.gpus
        freed_groups = []
        if task.groups:
            share = task.device_milli(node) or 0
            for gid in task.groups:
                g = node.groups.get(gid)
                if g is None:
                    continue
                g.releasing += share
                g.active_members -= 1
                whole = g.active_members == 0
                if whole:
                    node.rel_gpus += 1
                freed_groups.append((g, share, whole))
        op.undo = tuple(freed_groups)
        task.status = RELEASING
        if task.leaf is not None:
            task.leaf.active -= 1
        self.session.account(task, -1)
        self.fail_cache.clear()
        self.session.dirty.append(node.index)
        self.log.append(op)
        return op

    def _undo_evict(self, op: Change) -> None:
        task, node = op.task, op.node
        self.session.dirty.append(node.index)
        node.rel_cpu -= task.cpu
        node.rel_mem -= task.mem
        node.rel_pods -= 1
        node.rel_gpus -= task.gpus
        for g, share, whole in op.undo:
            g.releasing -= share
            g.active_members += 1
            if whole:
                node.rel_gpus -= 1
        task.status = RUNNING
        if task.leaf is not None:
            task.leaf.active += 1
        task.node = node  # a re-placed victim (consolidation) moved it in the simulation
        self.session.account(task, +1)
        self.fail_cache.clear()

    # ---- whole-job conversion ------------------------------------------------------------------------
    def convert_to_pipelined(self, ops: list[Change]) -> None:
        """Turn allocations into pipelined ones (resources stay taken); reversible."""
        for op in ops:
            if op.kind == "allocate":
                op.kind = "pipeline"
                op.task.status = PIPELINED
                for gid, _index in op.new_groups:
                    op.node.groups[gid].pipelined = True
                self.session.dirty.append(op.node.index)
                marker = Change("convert", op.task, op.node)
                marker.undo = (op,)
                self.log.append(marker)

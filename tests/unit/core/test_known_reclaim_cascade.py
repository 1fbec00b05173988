"""The allocate -> reclaim -> sibling-reclaim cascade the no-ping-pong property once found: allocate places
a pending job (j3, queue a) in the same cycle in which reclaim, which only takes victims that were running
before the cycle, used to evict the department sibling's pods (j4, queue b) for another department (j0,
queue c); in the next cycle b was below its share inside the department and reclaimed the pod allocate had
just placed. Now a department gives from its project most over its share first (reclaim.ordered_chunks) and
no project is taken below its share while a sibling stays above its own (reclaimable guard (c)), so c waits
one cycle, then takes from both projects, and nothing is reclaimed back afterwards."""

from test_properties_evictions import NS, _group_of, apply  # noqa: F401

from shoal.core.cycle import run_cycle
from shoal.core.model import (
    FractionRequest,  # noqa: F401
    Node,
    Pod,
    PodGroup,
    PriorityClass,
    Queue,
    QueueResource,
    ShardConfig,
    make_snapshot,
)
from shoal.core.plan import Evict

SPEC = {'nodes': [Node(name='n0', pool='', labels={}, taints=(), cpu_milli=64000, memory_bytes=68719476736, pods=110, gpus=5, gpu_memory_mib=40960, ready=True, unschedulable=False, mig_enabled=False),
     Node(name='n1', pool='', labels={}, taints=(), cpu_milli=64000, memory_bytes=68719476736, pods=110, gpus=6, gpu_memory_mib=40960, ready=True, unschedulable=False, mig_enabled=False)],
    'pods': [Pod(uid='uj0-0', namespace='ns', name='j0-0', pod_group='j0', subgroup=None, cpu_milli=0, memory_bytes=0, gpus=2, fraction=None, fraction_error=None, node_selector={}, affinity_terms=(), tolerations=(), phase='Pending', node_name=None, nominated_node=None, gpu_groups=(), created=0, task_priority=None, labels={}, deleting=False, gated=False, managed=True, owner_kind=None, owner_name=None, eviction_blocked=False),
     Pod(uid='uj0-1', namespace='ns', name='j0-1', pod_group='j0', subgroup=None, cpu_milli=0, memory_bytes=0, gpus=2, fraction=None, fraction_error=None, node_selector={}, affinity_terms=(), tolerations=(), phase='Pending', node_name=None, nominated_node=None, gpu_groups=(), created=1, task_priority=None, labels={}, deleting=False, gated=False, managed=True, owner_kind=None, owner_name=None, eviction_blocked=False),
     Pod(uid='uj0-2', namespace='ns', name='j0-2', pod_group='j0', subgroup=None, cpu_milli=0, memory_bytes=0, gpus=2, fraction=None, fraction_error=None, node_selector={}, affinity_terms=(), tolerations=(), phase='Pending', node_name=None, nominated_node=None, gpu_groups=(), created=2, task_priority=None, labels={}, deleting=False, gated=False, managed=True, owner_kind=None, owner_name=None, eviction_blocked=False),
     Pod(uid='uj1-0', namespace='ns', name='j1-0', pod_group='j1', subgroup=None, cpu_milli=0, memory_bytes=0, gpus=1, fraction=None, fraction_error=None, node_selector={}, affinity_terms=(), tolerations=(), phase='Pending', node_name=None, nominated_node=None, gpu_groups=(), created=10, task_priority=None, labels={}, deleting=False, gated=False, managed=True, owner_kind=None, owner_name=None, eviction_blocked=False),
     Pod(uid='uj2-0', namespace='ns', name='j2-0', pod_group='j2', subgroup=None, cpu_milli=0, memory_bytes=0, gpus=1, fraction=None, fraction_error=None, node_selector={}, affinity_terms=(), tolerations=(), phase='Pending', node_name=None, nominated_node=None, gpu_groups=(), created=20, task_priority=None, labels={}, deleting=False, gated=False, managed=True, owner_kind=None, owner_name=None, eviction_blocked=False),
     Pod(uid='uj3-0', namespace='ns', name='j3-0', pod_group='j3', subgroup=None, cpu_milli=0, memory_bytes=0, gpus=2, fraction=None, fraction_error=None, node_selector={}, affinity_terms=(), tolerations=(), phase='Pending', node_name=None, nominated_node=None, gpu_groups=(), created=30, task_priority=None, labels={}, deleting=False, gated=False, managed=True, owner_kind=None, owner_name=None, eviction_blocked=False),
     Pod(uid='uj4-0', namespace='ns', name='j4-0', pod_group='j4', subgroup=None, cpu_milli=0, memory_bytes=0, gpus=2, fraction=None, fraction_error=None, node_selector={}, affinity_terms=(), tolerations=(), phase='Running', node_name='n0', nominated_node=None, gpu_groups=(), created=40, task_priority=None, labels={}, deleting=False, gated=False, managed=True, owner_kind=None, owner_name=None, eviction_blocked=False),
     Pod(uid='uj4-1', namespace='ns', name='j4-1', pod_group='j4', subgroup=None, cpu_milli=0, memory_bytes=0, gpus=2, fraction=None, fraction_error=None, node_selector={}, affinity_terms=(), tolerations=(), phase='Running', node_name='n0', nominated_node=None, gpu_groups=(), created=41, task_priority=None, labels={}, deleting=False, gated=False, managed=True, owner_kind=None, owner_name=None, eviction_blocked=False),
     Pod(uid='uj4-2', namespace='ns', name='j4-2', pod_group='j4', subgroup=None, cpu_milli=0, memory_bytes=0, gpus=2, fraction=None, fraction_error=None, node_selector={}, affinity_terms=(), tolerations=(), phase='Running', node_name='n1', nominated_node=None, gpu_groups=(), created=42, task_priority=None, labels={}, deleting=False, gated=False, managed=True, owner_kind=None, owner_name=None, eviction_blocked=False),
     Pod(uid='uj5-0', namespace='ns', name='j5-0', pod_group='j5', subgroup=None, cpu_milli=0, memory_bytes=0, gpus=1, fraction=None, fraction_error=None, node_selector={}, affinity_terms=(), tolerations=(), phase='Running', node_name='n0', nominated_node=None, gpu_groups=(), created=50, task_priority=None, labels={}, deleting=False, gated=False, managed=True, owner_kind=None, owner_name=None, eviction_blocked=False)],
    'pod_groups': [PodGroup(namespace='ns', name='j0', uid='uj0', queue='c', min_member=3, min_subgroup=None, subgroups=(), priority_class_name='build-preemptible', priority=None, preemptibility='', created=0, node_pool='', topology=None, required_level=None, preferred_level=None, last_start_timestamp=None, stale_timestamp=None, last_eviction_timestamp=None, preemption_delay_s=None, staleness_grace_s=None, mark_unschedulable=True, scheduling_backoff=-1, condition_reason=None, annotations={}),
     PodGroup(namespace='ns', name='j1', uid='uj1', queue='a', min_member=1, min_subgroup=None, subgroups=(), priority_class_name='build', priority=None, preemptibility='', created=1, node_pool='', topology=None, required_level=None, preferred_level=None, last_start_timestamp=None, stale_timestamp=None, last_eviction_timestamp=None, preemption_delay_s=None, staleness_grace_s=None, mark_unschedulable=True, scheduling_backoff=-1, condition_reason=None, annotations={}),
     PodGroup(namespace='ns', name='j2', uid='uj2', queue='a', min_member=1, min_subgroup=None, subgroups=(), priority_class_name='build-preemptible', priority=None, preemptibility='', created=2, node_pool='', topology=None, required_level=None, preferred_level=None, last_start_timestamp=None, stale_timestamp=None, last_eviction_timestamp=None, preemption_delay_s=None, staleness_grace_s=None, mark_unschedulable=True, scheduling_backoff=-1, condition_reason=None, annotations={}),
     PodGroup(namespace='ns', name='j3', uid='uj3', queue='a', min_member=1, min_subgroup=None, subgroups=(), priority_class_name='build-preemptible', priority=None, preemptibility='', created=3, node_pool='', topology=None, required_level=None, preferred_level=None, last_start_timestamp=None, stale_timestamp=None, last_eviction_timestamp=None, preemption_delay_s=None, staleness_grace_s=None, mark_unschedulable=True, scheduling_backoff=-1, condition_reason=None, annotations={}),
     PodGroup(namespace='ns', name='j4', uid='uj4', queue='b', min_member=1, min_subgroup=None, subgroups=(), priority_class_name='build-preemptible', priority=None, preemptibility='', created=4, node_pool='', topology=None, required_level=None, preferred_level=None, last_start_timestamp=None, stale_timestamp=None, last_eviction_timestamp=None, preemption_delay_s=None, staleness_grace_s=None, mark_unschedulable=True, scheduling_backoff=-1, condition_reason=None, annotations={}),
     PodGroup(namespace='ns', name='j5', uid='uj5', queue='a', min_member=1, min_subgroup=None, subgroups=(), priority_class_name='build', priority=None, preemptibility='', created=5, node_pool='', topology=None, required_level=None, preferred_level=None, last_start_timestamp=None, stale_timestamp=None, last_eviction_timestamp=None, preemption_delay_s=None, staleness_grace_s=None, mark_unschedulable=True, scheduling_backoff=-1, condition_reason=None, annotations={})],
    'queues': [Queue(name='root', parent=None, display_name='', priority=100, created=0, gpu=QueueResource(quota=-1, limit=-1, weight=1), cpu=QueueResource(quota=-1, limit=-1, weight=1), memory=QueueResource(quota=-1, limit=-1, weight=1), preempt_min_runtime_s=None, reclaim_min_runtime_s=None),
     Queue(name='d', parent='root', display_name='', priority=100, created=0, gpu=QueueResource(quota=0, limit=-1, weight=1), cpu=QueueResource(quota=-1, limit=-1, weight=1), memory=QueueResource(quota=-1, limit=-1, weight=1), preempt_min_runtime_s=None, reclaim_min_runtime_s=None),
     Queue(name='a', parent='d', display_name='', priority=100, created=0, gpu=QueueResource(quota=0, limit=-1, weight=1), cpu=QueueResource(quota=-1, limit=-1, weight=1), memory=QueueResource(quota=-1, limit=-1, weight=1), preempt_min_runtime_s=None, reclaim_min_runtime_s=None),
     Queue(name='b', parent='d', display_name='', priority=100, created=0, gpu=QueueResource(quota=0, limit=-1, weight=1), cpu=QueueResource(quota=-1, limit=-1, weight=1), memory=QueueResource(quota=-1, limit=-1, weight=1), preempt_min_runtime_s=None, reclaim_min_runtime_s=None),
     Queue(name='c', parent='root', display_name='', priority=100, created=0, gpu=QueueResource(quota=0, limit=-1, weight=1), cpu=QueueResource(quota=-1, limit=-1, weight=1), memory=QueueResource(quota=-1, limit=-1, weight=1), preempt_min_runtime_s=None, reclaim_min_runtime_s=None)],
    'priority_classes': (PriorityClass(name='train', value=50, global_default=False),
     PriorityClass(name='build-preemptible', value=75, global_default=False),
     PriorityClass(name='build', value=100, global_default=False),
     PriorityClass(name='inference', value=125, global_default=False)),
    'config': ShardConfig(name='default', gpu_placement='binpack', cpu_placement='binpack', actions=('allocate', 'consolidation', 'reclaim', 'preempt', 'stalegangeviction'), reservation_namespace='kai-resource-reservation', k_value=1.0, usage=(), preempt_min_runtime_s=0, reclaim_min_runtime_s=0, reclaim_resolve_method='lca', default_staleness_grace_s=60, max_consolidation_preemptees=16, victim_budget=10000, queue_depth_per_action={}, stuck_in_releasing_s=120, reclaimer_saturation_multiplier=1.0),
    'now': 1000,
    'revision': 1}


def _cycles(n: int):
    snap = make_snapshot(**SPEC)
    plans = []
    for _ in range(n):
        plan = run_cycle(snap)
        plans.append(plan)
        snap = apply(snap, plan)
    return plans


def test_department_gives_from_the_project_over_its_share_and_nothing_is_taken_back():
    first, second, third, fourth = _cycles(4)
    assert first.of(Evict) == []  # the only victim, j4, would empty b while a stays above its share
    reclaimed = sorted(e.pod for e in second.of(Evict) if e.action == "reclaim")
    assert reclaimed == ["ns/j3-0", "ns/j4-1", "ns/j4-2"]  # from b and from a, down to their shares
    assert {e.by for e in second.of(Evict)} == {"ns/j0"}
    assert [e.pod for e in third.of(Evict) if e.action == "reclaim"] == []
    assert [e.pod for e in fourth.of(Evict) if e.action == "reclaim"] == []

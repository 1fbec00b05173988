"""Safety of the memory policy over random GPUs, shares and processes (gpu-sharing.md §6.1, §7.9)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from services.nodeagent.binding import Claim, GpuBinding, assign_devices, attribute
from services.nodeagent.inventory import GpuProcess
from services.nodeagent.memory_policy import Kill, PolicyConfig, PolicyState, evaluate
from services.nodeagent.procmap import ContainerRef

from .helpers import share

GPU = "GPU-0"

shares_st = st.lists(
    st.tuples(st.integers(100, 4000), st.integers(0, 4000), st.integers(0, 100)),  # request, extra limit, priority
    min_size=1, max_size=4,
)
procs_st = st.lists(
    st.tuples(st.integers(-1, 3), st.one_of(st.none(), st.integers(0, 6000))),  # owner index (-1: foreign), used
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(shares_st, st.lists(procs_st, min_size=1, max_size=4), st.sampled_from(["report", "enforce"]),
       st.booleans())
def test_kills_only_hit_known_over_share_or_borrowing_processes(specs, ticks, policy, partial):
    shares = [share(f"p{i}", req, req + extra, priority=prio) for i, (req, extra, prio) in enumerate(specs)]
    binding = GpuBinding(GPU, 10000, tuple(shares))
    config = PolicyConfig(policy=policy, grace_s=0)
    state = PolicyState()
    for now, procs in enumerate(ticks):
        procs = [(owner if owner < len(shares) else -1, used) for owner, used in procs]
        processes = [GpuProcess(100 + i, GPU, used, 1000 + i) for i, (_, used) in enumerate(procs)]
        refs = {100 + i: ContainerRef(shares[o].pod_uid, "c") for i, (o, _) in enumerate(procs) if o >= 0}
        att = attribute(processes, refs, [binding])
        out = evaluate([binding], att, state, float(now), config, partial=partial,
                       live_pids=frozenset(p.pid for p in processes))
        state = out.state
        kills = [d for d in out.decisions if isinstance(d, Kill)]
        assert len(kills) <= 1  # at most one kill per GPU per tick
        if policy == "report" or partial:
            assert kills == []
        for kill in kills:
            assert kill.pid in refs, "never a foreign process"
            owner = next(s for s in shares if s.pod_uid == refs[kill.pid].pod_uid)
            usage = att.usage[(owner.pod_uid, GPU)]
            assert not usage.unknown, "never on an unknown memory figure"
            assert kill.start_ticks == 1000 + (kill.pid - 100)
            if kill.reason == "GPUMemoryLimitExceeded":
                assert usage.used_mib > owner.mem_limit_mib
            else:
                assert usage.used_mib > owner.mem_request_mib, "a reclaim victim is borrowing"


gpus_st = st.integers(1, 6).map(lambda n: [f"GPU-{i}" for i in range(n)])


@settings(max_examples=200, deadline=None)
@given(gpus_st, st.lists(st.tuples(st.integers(0, 9), st.integers(1, 3), st.lists(st.integers(0, 7), max_size=2)),
                         max_size=6), st.booleans())
def test_assignment_never_shares_a_gpu_and_keeps_existing(gpus, raw, may_choose):
    claims = [Claim(f"ns/c{i}", f"t{t}", count, tuple(f"GPU-{g}" for g in existing))
              for i, (t, count, existing) in enumerate(raw)]
    got = assign_devices(gpus, claims, may_choose=may_choose)
    held = [g for devs in got.devices.values() for g in devs]
    assert len(held) == len(set(held)) and set(held) <= set(gpus)
    for claim in claims:
        if claim.existing:
            assert claim.pod_key not in got.new  # existing annotations are never rewritten
        elif claim.pod_key in got.new:
            assert may_choose and len(got.new[claim.pod_key]) == claim.count
    again = assign_devices(gpus, [Claim(c.pod_key, c.created, c.count, c.existing or got.new.get(c.pod_key, ()))
                                  for c in claims], may_choose=may_choose)
    assert again.devices == got.devices  # a restart (annotations written) changes nothing

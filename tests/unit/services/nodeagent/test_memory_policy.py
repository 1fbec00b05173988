from services.nodeagent.binding import GpuBinding, attribute
from services.nodeagent.inventory import GpuProcess
from services.nodeagent.memory_policy import Kill, PolicyConfig, PolicyState, Report, evaluate
from services.nodeagent.procmap import ContainerRef

from .helpers import share

GPU = "GPU-0"


def run(binding, procs, state, now, config, partial=False):
    refs = {p.pid: ContainerRef(f"uid-{owner}", "c") for p, owner in procs}
    att = attribute([p for p, _ in procs], refs, [binding])
    live = frozenset(p.pid for p, _ in procs)
    return evaluate([binding], att, state, now, config, partial=partial, live_pids=live)


def proc(pid, used, start=None):
    return GpuProcess(pid, GPU, used, start if start is not None else pid * 10)


def test_report_once_per_episode_and_never_kill():
    b = GpuBinding(GPU, 10000, (share("a", 2500), share("b", 2500)))
    cfg = PolicyConfig(policy="report", grace_s=0)
    out = run(b, [(proc(1, 4000), "a"), (proc(2, 1000), "b")], PolicyState(), 0.0, cfg)
    assert [type(d) for d in out.decisions] == [Report]
    assert out.decisions[0].pod_key == "ns/a" and "4000 MiB" in out.decisions[0].message
    assert out.over_share_mib[("uid-a", GPU)] == 1500 and out.over_share_mib[("uid-b", GPU)] == 0
    again = run(b, [(proc(1, 4000), "a"), (proc(2, 1000), "b")], out.state, 5.0, cfg)
    assert again.decisions == ()  # same episode: no repeat event
    back = run(b, [(proc(1, 2000), "a")], again.state, 6.0, cfg)
    assert back.state.over_since == {}
    new_episode = run(b, [(proc(1, 4000), "a")], back.state, 7.0, cfg)
    assert [d.reason for d in new_episode.decisions] == ["GPUMemoryOverShare"]


def test_enforce_kills_largest_process_after_grace():
    b = GpuBinding(GPU, 10000, (share("a", 2500),))
    cfg = PolicyConfig(policy="enforce", grace_s=10)
    procs = [(proc(1, 2000), "a"), (proc(2, 1500), "a")]
    first = run(b, procs, PolicyState(), 100.0, cfg)
    assert [type(d) for d in first.decisions] == [Report]
    early = run(b, procs, first.state, 105.0, cfg)
    assert early.decisions == ()
    late = run(b, procs, early.state, 110.0, cfg)
    kills = [d for d in late.decisions if isinstance(d, Kill)]
    assert [(k.pid, k.start_ticks, k.reason) for k in kills] == [(1, 10, "GPUMemoryLimitExceeded")]
    # the killed pid is still listed: no second victim on this GPU until it is released
    pending = run(b, procs, late.state, 111.0, cfg)
    assert not [d for d in pending.decisions if isinstance(d, Kill)]


def test_within_share_never_killed_and_partial_or_unknown_never_kill():
    b = GpuBinding(GPU, 10000, (share("a", 2500), share("b", 2500, 9000)))
    cfg = PolicyConfig(policy="enforce", grace_s=0)
    ok = run(b, [(proc(1, 2500), "a"), (proc(2, 6000), "b")], PolicyState(), 0.0, cfg)
    assert ok.decisions == ()  # a at its share, b borrowing within its limit
    over = [(proc(1, 3000), "a")]
    assert not [d for d in run(b, over, PolicyState(), 0.0, cfg, partial=True).decisions if isinstance(d, Kill)]
    unknown = [(proc(1, 3000), "a"), (proc(3, None), "a")]
    assert not [d for d in run(b, unknown, PolicyState(), 0.0, cfg).decisions if isinstance(d, Kill)]


def test_off_does_nothing():
    b = GpuBinding(GPU, 10000, (share("a", 100),))
    out = run(b, [(proc(1, 9000), "a")], PolicyState(), 0.0, PolicyConfig(policy="off", grace_s=0))
    assert out.decisions == ()


def test_reclaim_kills_borrower_process_when_owner_grows():
    owner = share("owner", 5000)
    borrower = share("borrower", 2500, 10000, priority=50)
    b = GpuBinding(GPU, 10000, (owner, borrower))
    cfg = PolicyConfig(policy="enforce", grace_s=60)
    quiet = run(b, [(proc(7, 6000), "borrower"), (proc(8, 1500), "borrower")], PolicyState(), 0.0, cfg)
    assert quiet.decisions == ()  # borrowing while nobody needs it is fine
    # owner starts: 1000 MiB used, wants 5000; free = 10000 - 8500 = 1500 < 4000 needed
    grown = run(b, [(proc(7, 6000), "borrower"), (proc(8, 1500), "borrower"), (proc(3, 1000), "owner")],
                quiet.state, 1.0, cfg)
    kills = [d for d in grown.decisions if isinstance(d, Kill)]
    assert len(kills) == 1
    k = kills[0]
    assert (k.pid, k.pod_key, k.reason) == (7, "ns/borrower", "GPUMemoryReclaimed")
    assert "ns/owner" in k.message and "borrowed" in k.message


def test_reclaim_never_kills_within_request_and_report_mode_only_reports():
    owner = share("owner", 5000)
    within = share("within", 5000, 10000)
    b = GpuBinding(GPU, 10000, (owner, within))
    cfg = PolicyConfig(policy="enforce", grace_s=60)
    s0 = run(b, [(proc(1, 5000), "within")], PolicyState(), 0.0, cfg).state
    out = run(b, [(proc(1, 5000), "within"), (proc(2, 100), "owner"), (proc(3, 5500), "x")], s0, 1.0, cfg)
    assert not [d for d in out.decisions if isinstance(d, Kill)]

    borrower = share("borrower", 1000, 10000)
    b2 = GpuBinding(GPU, 10000, (owner, borrower))
    rep = PolicyConfig(policy="report", grace_s=60)
    s1 = run(b2, [(proc(1, 9000), "borrower")], PolicyState(), 0.0, rep).state
    out2 = run(b2, [(proc(1, 9000), "borrower"), (proc(2, 100), "owner")], s1, 1.0, rep)
    assert [d.reason for d in out2.decisions] == ["GPUMemoryReclaimed"]
    assert isinstance(out2.decisions[0], Report) and "(report only)" in out2.decisions[0].message


def test_reclaim_victim_order_low_priority_first():
    owner = share("owner", 4000)
    hi = share("hi", 1000, 10000, priority=100)
    lo = share("lo", 1000, 10000, priority=10)
    b = GpuBinding(GPU, 10000, (owner, hi, lo))
    cfg = PolicyConfig(policy="enforce")
    base = [(proc(1, 4000), "hi"), (proc(2, 3000), "lo")]
    s = run(b, base, PolicyState(), 0.0, cfg).state
    out = run(b, base + [(proc(3, 2000), "owner"), (proc(4, 1500), "owner")], s, 1.0, cfg)
    assert [(d.pid, d.pod_key) for d in out.decisions if isinstance(d, Kill)] == [(2, "ns/lo")]


def test_restarted_agent_does_not_reclaim_on_its_first_sample():
    owner = share("owner", 5000)
    borrower = share("borrower", 1000, 10000)
    b = GpuBinding(GPU, 10000, (owner, borrower))
    procs = [(proc(1, 9000), "borrower"), (proc(2, 500), "owner")]
    cfg = PolicyConfig(policy="enforce")
    first = run(b, procs, PolicyState(), 0.0, cfg)
    assert first.decisions == ()
    grown = run(b, [(proc(1, 9000), "borrower"), (proc(2, 900), "owner")], first.state, 1.0, cfg)
    assert [d.pid for d in grown.decisions if isinstance(d, Kill)] == [1]

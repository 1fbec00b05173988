from services.nodeagent.binding import Claim, GpuBinding, assign_devices, attribute
from services.nodeagent.inventory import GpuProcess
from services.nodeagent.procmap import ContainerRef

from .helpers import share

GPUS = ["GPU-0", "GPU-1", "GPU-2"]


def test_new_claims_get_lowest_free_gpus_in_creation_order():
    got = assign_devices(GPUS, [Claim("r/b", "t2", 1), Claim("r/a", "t1", 1)], may_choose=True)
    assert got.devices == {"r/a": ("GPU-0",), "r/b": ("GPU-1",)}
    assert got.new == got.devices and not got.conflicts and not got.waiting


def test_existing_annotations_are_kept_and_never_shared():
    claims = [
        Claim("r/old", "t1", 1, existing=("GPU-1",)),
        Claim("default/train", "t0", 2),  # a whole-GPU pod needing two devices
        Claim("r/new", "t3", 1),
    ]
    got = assign_devices(GPUS, claims, may_choose=True)
    assert got.devices["r/old"] == ("GPU-1",)
    assert got.devices["default/train"] == ("GPU-0", "GPU-2")
    assert "r/old" not in got.new
    assert got.waiting == ("r/new",)  # no GPU left: waits instead of doubling up
    held = [g for devs in got.devices.values() for g in devs]
    assert len(held) == len(set(held))


def test_restart_is_idempotent():
    first = assign_devices(GPUS, [Claim("r/a", "t1", 1), Claim("r/b", "t2", 1)], may_choose=True)
    again = assign_devices(
        GPUS, [Claim(k, t, 1, existing=first.devices[k]) for k, t in (("r/a", "t1"), ("r/b", "t2"))], may_choose=True
    )
    assert again.devices == first.devices and again.new == {}


def test_duplicate_existing_is_a_conflict_and_real_mode_never_chooses():
    got = assign_devices(
        GPUS,
        [Claim("r/a", "t1", 1, existing=("GPU-0",)), Claim("r/b", "t2", 1, existing=("GPU-0",)),
         Claim("r/c", "t3", 1, existing=("GPU-9",))],
        may_choose=True,
    )
    assert {(c.pod_key, c.holder) for c in got.conflicts} == {("r/b", "r/a"), ("r/c", "")}
    real = assign_devices(GPUS, [Claim("r/x", "t1", 1), Claim("r/y", "t2", 1, observed=("GPU-2",))], may_choose=False)
    assert real.devices == {"r/y": ("GPU-2",)} and real.new == {"r/y": ("GPU-2",)}
    assert real.waiting == ("r/x",)


def test_attribution_charges_own_share_and_leaves_foreign():
    b = GpuBinding("GPU-0", 10000, (share("a", 5000), share("b", 5000)))
    procs = [
        GpuProcess(1, "GPU-0", 3000, 11),
        GpuProcess(2, "GPU-0", 1000, 12),
        GpuProcess(3, "GPU-0", None, 13),
        GpuProcess(4, "GPU-0", 700, 14),  # no pod: foreign
        GpuProcess(5, "GPU-1", 900, 15),  # pod a, but on a GPU it is not bound to: foreign
    ]
    refs = {1: ContainerRef("uid-a", "c"), 2: ContainerRef("uid-a", "c"), 3: ContainerRef("uid-b", "d"),
            5: ContainerRef("uid-a", "c")}
    att = attribute(procs, refs, [b])
    assert att.usage[("uid-a", "GPU-0")].used_mib == 4000
    assert [p.pid for p in att.usage[("uid-a", "GPU-0")].processes] == [1, 2]
    assert att.usage[("uid-b", "GPU-0")].unknown
    assert att.foreign_mib == {"GPU-0": 700, "GPU-1": 900}

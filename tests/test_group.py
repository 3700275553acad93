"""Volume groups and logical volumes: create, list, extend, rename, remove; refused requests
change nothing (SPEC §6); a group in use by someone else is refused with a clear error."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading

import pytest
from conftest import MiB, head_hash

from traxfs.volume.device import create_image
from traxfs.volume.errors import (
    InUseError,
    MetadataError,
    NoSpaceError,
    OccupiedError,
    UsageError,
    VolumeError,
)
from traxfs.volume.group import GROUP, USE, VolumeGroup, list_groups
from traxfs.volume.scan import scan_one

PV_SIZE = 16 * MiB  # 14 extents of 1 MiB after the 2 MiB label + metadata area
PE_PER_PV = 14


def new_group(registry, make_pvs, n=3, name="vg", size=PV_SIZE):
    paths = make_pvs(n, size=size)
    VolumeGroup.create(registry, name, paths, extent_size=MiB)
    return paths


def state(registry, paths):
    """Everything a refused request must leave alone: the groups' documents and device heads."""
    return {n: m.to_doc() for n, m in list_groups(registry).items()}, {p: head_hash(p) for p in paths}


def pattern(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


# ----- groups -----------------------------------------------------------------------------------------

def test_create_and_list(registry, make_pvs):
    paths = new_group(registry, make_pvs)
    groups = list_groups(registry)
    assert list(groups) == ["vg"]
    meta = groups["vg"]
    assert meta.seq == 1 and meta.extent_size == MiB and meta.lvs == []
    assert sorted(p.path for p in meta.pvs) == sorted(paths)
    assert all(p.pe_count == PE_PER_PV and p.pe_start == 2 * MiB for p in meta.pvs)
    assert meta.free_extents() == 3 * PE_PER_PV
    with VolumeGroup.open(registry, "vg") as vg:
        assert vg.meta.to_doc() == meta.to_doc() and vg.warnings == [] and vg.stale == []
    assert sorted(registry.paths()) == sorted(paths)


def test_create_labels_raw_devices_implicitly(registry, tmp_path):
    raw = [str(tmp_path / f"raw{i}.img") for i in range(2)]
    for p in raw:
        create_image(p, PV_SIZE).close()
    VolumeGroup.create(registry, "vg", raw, extent_size=MiB)
    assert sorted(registry.paths()) == sorted(raw)
    for p in raw:
        sd = scan_one(p)
        try:
            assert sd.vg_name == "vg"
        finally:
            sd.close()


def test_two_groups_side_by_side(registry, make_pvs):
    new_group(registry, make_pvs, n=2, name="a")
    new_group(registry, make_pvs, n=1, name="b")
    assert sorted(list_groups(registry)) == ["a", "b"]
    with VolumeGroup.open(registry, "a") as a, VolumeGroup.open(registry, "b") as b:
        assert len(a.meta.pvs) == 2 and len(b.meta.pvs) == 1


@pytest.mark.parametrize(
    "name, paths, extent, match",
    [
        ("", "ok", MiB, "invalid volume group name"),
        ("-vg", "ok", MiB, "invalid volume group name"),
        ("a/b", "ok", MiB, "invalid volume group name"),
        ("x" * 65, "ok", MiB, "invalid volume group name"),
        ("vg2", "none", MiB, "at least one device"),
        ("vg2", "ok", 3 * MiB, "power of two"),
        ("vg2", "ok", 512 * 1024, "at least 1 MiB"),
        ("vg", "ok", MiB, "already exists"),
        ("vg2", "twice", MiB, "given twice"),
    ],
)
def test_bad_group_create_changes_nothing(registry, make_pvs, name, paths, extent, match):
    members = new_group(registry, make_pvs, n=1, name="vg")
    spare = make_pvs(2)
    arg = {"ok": spare, "none": [], "twice": [spare[0], spare[1], spare[0]]}[paths]
    before = state(registry, members + spare)
    with pytest.raises(UsageError, match=match):
        VolumeGroup.create(registry, name, arg, extent_size=extent)
    assert state(registry, members + spare) == before


def test_raw_device_given_twice_changes_nothing(registry, tmp_path):
    p = str(tmp_path / "raw.img")
    create_image(p, PV_SIZE).close()
    before = head_hash(p)
    with pytest.raises(UsageError, match="given twice"):
        VolumeGroup.create(registry, "vg", [p, p], extent_size=MiB)
    assert head_hash(p) == before and registry.paths() == [] and list_groups(registry) == {}


def test_extend_group(registry, make_pvs):
    new_group(registry, make_pvs, n=2)
    extra = make_pvs(2, size=PV_SIZE)
    with VolumeGroup.open(registry, "vg") as vg:
        seq = vg.meta.seq
        vg.extend(extra)
        assert vg.meta.seq == seq + 1
        assert vg.meta.free_extents() == 4 * PE_PER_PV
        # the new devices are usable right away: a 4-stripe volume needs all of them
        vg.create_lv("wide", 4 * MiB, "striped", stripes=4)
    meta = list_groups(registry)["vg"]
    assert len(meta.pvs) == 4 and set(extra) <= {p.path for p in meta.pvs}
    assert meta.lv("wide").stripes == 4 and set(meta.lv("wide").pvs()) == {p.uuid for p in meta.pvs}


def test_extend_with_too_small_device_changes_nothing(registry, make_pvs):
    paths = make_pvs(1, size=64 * MiB)
    VolumeGroup.create(registry, "vg", paths, extent_size=8 * MiB)
    (tiny,) = make_pvs(1, size=8 * MiB)  # 6 MiB of data area: less than one 8 MiB extent
    before = state(registry, paths + [tiny])
    with VolumeGroup.open(registry, "vg") as vg:
        with pytest.raises(NoSpaceError, match=tiny):
            vg.extend([tiny])
        assert len(vg.meta.pvs) == 1
    assert state(registry, paths + [tiny]) == before


def test_rename_group(registry, make_pvs):
    new_group(registry, make_pvs, n=2)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.create_lv("data", 2 * MiB)
        vg.open_lv("data").write(0, b"hello")
        vg.rename("renamed")
    assert list(list_groups(registry)) == ["renamed"]
    with pytest.raises(MetadataError, match="no volume group named 'vg'"):
        with VolumeGroup.open(registry, "vg"):
            pass
    with VolumeGroup.open(registry, "renamed") as vg:
        assert vg.open_lv("data").read(0, 5) == b"hello"


@pytest.mark.parametrize("new_name, match", [("other", "already exists"), ("bad/name", "invalid"), ("", "invalid")])
def test_bad_rename_changes_nothing(registry, make_pvs, new_name, match):
    paths = new_group(registry, make_pvs, n=1)
    paths += new_group(registry, make_pvs, n=1, name="other")
    before = state(registry, paths)
    with VolumeGroup.open(registry, "vg") as vg:
        with pytest.raises(UsageError, match=match):
            vg.rename(new_name)
        assert vg.meta.name == "vg"
    assert state(registry, paths) == before


def test_remove_group(registry, make_pvs):
    paths = new_group(registry, make_pvs, n=2)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.create_lv("data", 2 * MiB)
    before = state(registry, paths)
    with VolumeGroup.open(registry, "vg") as vg:
        with pytest.raises(UsageError, match="data"):
            vg.remove()
    assert state(registry, paths) == before
    with VolumeGroup.open(registry, "vg") as vg:
        vg.remove(force=True)
    assert list_groups(registry) == {}
    for p in paths:
        sd = scan_one(p)
        try:
            assert sd.orphan and sd.vg_name is None
        finally:
            sd.close()
    # the devices are free again: a new group can take them
    VolumeGroup.create(registry, "again", paths, extent_size=MiB)
    assert list_groups(registry)["again"].free_extents() == 2 * PE_PER_PV


# ----- logical volumes --------------------------------------------------------------------------------

def test_create_list_rename_remove_lvs(registry, make_pvs):
    new_group(registry, make_pvs, n=3)
    with VolumeGroup.open(registry, "vg") as vg:
        free = vg.meta.free_extents()
        vg.create_lv("lin", 3 * MiB)
        vg.create_lv("str", 3 * MiB, "striped", stripes=3, stripe_unit=128 * 1024)
        vg.create_lv("trx", 2 * MiB, "traxtent", stripes=2)
        assert vg.meta.free_extents() == free - 3 - 3 - 2
    meta = list_groups(registry)["vg"]
    got = {lv.name: (lv.layout, lv.stripes, lv.stripe_unit, lv.extents) for lv in meta.lvs}
    assert got == {
        "lin": ("linear", 1, 256 * 1024, 3),
        "str": ("striped", 3, 128 * 1024, 3),
        "trx": ("traxtent", 2, 256 * 1024, 2),
    }
    assert all(len({a.pv for a in s.areas}) == s.stripes for lv in meta.lvs for s in lv.legs[0].segments)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.open_lv("str").write(0, b"striped data")
        vg.rename_lv("str", "str2")
        assert vg.open_lv("str2").read(0, 12) == b"striped data"
        with pytest.raises(UsageError, match="no logical volume 'str'"):
            vg.open_lv("str")
        vg.remove_lv("lin")
        assert vg.meta.free_extents() == free - 3 - 2
    meta = list_groups(registry)["vg"]
    assert sorted(lv.name for lv in meta.lvs) == ["str2", "trx"]


def test_striped_size_rounds_up_to_whole_rows(registry, make_pvs):
    new_group(registry, make_pvs, n=3)
    with VolumeGroup.open(registry, "vg") as vg:
        lv = vg.create_lv("s", 4 * MiB + 1, "striped", stripes=3)
        assert lv.extents == 6 and vg.open_lv("s").size == 6 * MiB


@pytest.mark.timeout(60)
@pytest.mark.parametrize("layout, kw", [("linear", {}), ("striped", {"stripes": 2, "stripe_unit": 64 * 1024}),
                                        ("traxtent", {"stripes": 3})])
def test_extend_lv_keeps_data(registry, make_pvs, layout, kw):
    new_group(registry, make_pvs, n=3)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.create_lv("v", 3 * MiB, layout, **kw)
        vg.create_lv("blocker", 2 * MiB)  # so the growth lands in a new segment elsewhere
        olv = vg.open_lv("v")
        old = pattern(1, olv.size)
        olv.write(0, old)
        olv.flush()
        vg.extend_lv("v", 9 * MiB)
        assert len(vg.meta.lv("v").legs[0].segments) >= 2
        olv = vg.open_lv("v")
        assert olv.size >= 9 * MiB
        assert olv.read(0, len(old)) == old
        new = pattern(2, olv.size - len(old))
        olv.write(len(old), new)
        olv.flush()
    with VolumeGroup.open(registry, "vg") as vg:
        olv = vg.open_lv("v")
        assert olv.read(0, olv.size) == old + new
        # same size again is a no-op; shrinking is refused and changes nothing
        seq = vg.meta.seq
        vg.extend_lv("v", olv.size)
        with pytest.raises(UsageError, match="shrinking"):
            vg.extend_lv("v", MiB)
        assert vg.meta.seq == seq and vg.meta.lv("v").extents * MiB == olv.size


def test_allocation_from_fragmented_free_space(registry, make_pvs):
    """A linear volume larger than any free hole takes several runs of one device; they must
    not overlap each other or the volumes around them."""
    new_group(registry, make_pvs, n=1)
    with VolumeGroup.open(registry, "vg") as vg:
        for name in ("a", "b", "c", "d"):
            vg.create_lv(name, 3 * MiB)
        vg.remove_lv("b")  # holes: 3 extents in the middle, 2 at the end
        vg.create_lv("big", 5 * MiB)
        segs = vg.meta.lv("big").legs[0].segments
        assert len(segs) == 2 and len({a.pv for s in segs for a in s.areas}) == 1
        contents = {}
        for i, lv in enumerate(vg.meta.lvs):
            olv = vg.open_lv(lv.name)
            contents[lv.name] = pattern(i, olv.size)
            olv.write(0, contents[lv.name])
    with VolumeGroup.open(registry, "vg") as vg:
        assert vg.meta.free_extents() == 0
        for name, data in contents.items():
            assert vg.open_lv(name).read(0, len(data)) == data, name


def test_striped_allocation_over_unequal_holes(registry, make_pvs):
    """Stripes over devices whose free runs differ: a run is taken partly, and its rest is taken
    by the next segment of the same allocation."""
    a, b = new_group(registry, make_pvs, n=2)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.create_lv("x1", 4 * MiB, pvs=[b])
        vg.create_lv("x2", 3 * MiB, pvs=[b])
        vg.create_lv("x3", 7 * MiB, pvs=[b])
        vg.remove_lv("x1")
        vg.remove_lv("x3")  # b: free runs of 4 and 7 extents; a: one run of 14
        lv = vg.create_lv("s", 20 * MiB, "striped", stripes=2, stripe_unit=64 * 1024)
        assert len(lv.legs[0].segments) == 2
        olv = vg.open_lv("s")
        data = pattern(9, olv.size)
        olv.write(0, data)
        keep = pattern(10, 3 * MiB)
        vg.open_lv("x2").write(0, keep)
    with VolumeGroup.open(registry, "vg") as vg:
        assert vg.open_lv("s").read(0, len(data)) == data
        assert vg.open_lv("x2").read(0, len(keep)) == keep


def test_no_space_changes_nothing(registry, make_pvs):
    paths = new_group(registry, make_pvs, n=2)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.create_lv("a", 20 * MiB)  # 14 + 6: both devices used
        vg.create_lv("b", 2 * MiB)
        free = vg.meta.free_extents()
        assert free == 2 * PE_PER_PV - 22
    before = state(registry, paths)
    with VolumeGroup.open(registry, "vg") as vg:
        doc = vg.meta.to_doc()
        with pytest.raises(NoSpaceError, match="vg"):
            vg.create_lv("c", (free + 1) * MiB)
        with pytest.raises(NoSpaceError):
            vg.extend_lv("b", (2 + free + 1) * MiB)
        assert sum(1 for runs in vg.meta.free_runs().values() if runs) == 1
        with pytest.raises(NoSpaceError, match="2 distinct devices"):  # free space is all on one device
            vg.create_lv("s", 2 * MiB, "striped", stripes=2)
        with pytest.raises(NoSpaceError):
            vg.create_lv("m", (free // 2 + 1) * MiB, mirror=True)
        assert vg.meta.to_doc() == doc, "a refused request changed the in-memory document"
    assert state(registry, paths) == before
    with VolumeGroup.open(registry, "vg") as vg:  # exactly full works, then one byte more does not
        vg.create_lv("rest", free * MiB)
        assert vg.meta.free_extents() == 0
        with pytest.raises(NoSpaceError):
            vg.create_lv("one", 1)
        olv = vg.open_lv("rest")
        olv.write(olv.size - 3, b"end")
        assert olv.read(olv.size - 3, 3) == b"end"


BAD_LV = [
    ({"name": "", "size": MiB}, "invalid logical volume name"),
    ({"name": ".hidden", "size": MiB}, "invalid logical volume name"),
    ({"name": "a b", "size": MiB}, "invalid logical volume name"),
    ({"name": "n" * 65, "size": MiB}, "invalid logical volume name"),
    ({"name": "dup", "size": MiB}, "already has"),
    ({"name": "z", "size": 0}, "size must be positive"),
    ({"name": "z", "size": -MiB}, "size must be positive"),
    ({"name": "z", "size": MiB, "layout": "raid5"}, "unknown layout"),
    ({"name": "z", "size": MiB, "layout": "linear", "stripes": 2}, "exactly one stripe"),
    ({"name": "z", "size": MiB, "layout": "striped", "stripes": 0}, "stripes"),
    ({"name": "z", "size": MiB, "layout": "striped", "stripes": 4}, "4 stripes need 4 devices"),
    ({"name": "z", "size": MiB, "layout": "striped", "stripe_unit": 1000}, "power of two"),
    ({"name": "z", "size": MiB, "layout": "striped", "stripe_unit": 2048}, "at least 4096"),
    ({"name": "z", "size": MiB, "layout": "striped", "stripe_unit": 2 * MiB}, "does not divide the extent"),
    ({"name": "z", "size": MiB, "layout": "traxtent", "stripe_unit": 3 * 4096}, "power of two"),
    ({"name": "z", "size": MiB, "layout": "striped", "stripes": 2, "mirror": True}, "needs 4 devices"),
    ({"name": "z", "size": MiB, "pvs": ["/nonexistent"]}, "not a present device"),
]


@pytest.mark.parametrize("kw, match", BAD_LV, ids=[m for _, m in BAD_LV])
def test_bad_lv_request_changes_nothing(registry, make_pvs, kw, match):
    paths = new_group(registry, make_pvs, n=3)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.create_lv("dup", MiB)
    before = state(registry, paths)
    with VolumeGroup.open(registry, "vg") as vg:
        seq = vg.meta.seq
        kw = dict(kw)
        with pytest.raises(UsageError, match=match):
            vg.create_lv(kw.pop("name"), kw.pop("size"), **kw)
        assert vg.meta.seq == seq and [lv.name for lv in vg.meta.lvs] == ["dup"]
    assert state(registry, paths) == before


@pytest.mark.parametrize("op", ["rename-to-existing", "rename-bad", "rename-unknown", "remove-unknown",
                                "extend-unknown", "extend-zero", "open-unknown"])
def test_bad_lv_change_changes_nothing(registry, make_pvs, op):
    paths = new_group(registry, make_pvs, n=2)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.create_lv("a", MiB)
        vg.create_lv("b", MiB)
    before = state(registry, paths)
    calls = {
        "rename-to-existing": lambda vg: vg.rename_lv("a", "b"),
        "rename-bad": lambda vg: vg.rename_lv("a", "x/y"),
        "rename-unknown": lambda vg: vg.rename_lv("nope", "c"),
        "remove-unknown": lambda vg: vg.remove_lv("nope"),
        "extend-unknown": lambda vg: vg.extend_lv("nope", 4 * MiB),
        "extend-zero": lambda vg: vg.extend_lv("a", 0),
        "open-unknown": lambda vg: vg.open_lv("nope"),
    }
    with VolumeGroup.open(registry, "vg") as vg:
        seq = vg.meta.seq
        with pytest.raises(UsageError):
            calls[op](vg)
        assert vg.meta.seq == seq and sorted(lv.name for lv in vg.meta.lvs) == ["a", "b"]
    assert state(registry, paths) == before


def test_pv_create_refuses_a_labelled_device(registry, make_pvs):
    from traxfs.volume.scan import pv_create

    paths = new_group(registry, make_pvs, n=1)
    (orphan,) = make_pvs(1)
    before = state(registry, paths + [orphan])
    with pytest.raises(OccupiedError, match="volume group 'vg'.*use --force"):
        pv_create(registry, paths[0])
    with pytest.raises(OccupiedError, match="no group yet.*use --force"):
        pv_create(registry, orphan)
    assert state(registry, paths + [orphan]) == before


# ----- locking --------------------------------------------------------------------------------------

HOLDER = """
import sys
from traxfs.volume.group import VolumeGroup
from traxfs.volume.registry import Registry
with VolumeGroup.open(Registry(home=sys.argv[1]), sys.argv[2]):
    print("ready", flush=True)
    sys.stdin.read()
"""


@pytest.mark.timeout(60)
def test_group_in_use_by_another_process(registry, make_pvs):
    paths = new_group(registry, make_pvs, n=2)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(registry.home), "vg"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        before = state(registry, paths)
        with pytest.raises(VolumeError, match=f"volume group vg: in use by pid {proc.pid} \\(python"):
            with VolumeGroup.open(registry, "vg"):
                pass
        assert state(registry, paths) == before
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert proc.returncode == 0, proc.stderr.read()
    with VolumeGroup.open(registry, "vg") as vg:  # released when the holder exits
        vg.create_lv("after", MiB)


@pytest.mark.timeout(30)
def test_group_in_use_by_another_thread(registry, make_pvs):
    new_group(registry, make_pvs, n=1)
    errors: list[BaseException] = []

    def other():
        try:
            with VolumeGroup.open(registry, "vg"):
                pass
        except BaseException as e:  # noqa: B036 - handed back to the test
            errors.append(e)

    with VolumeGroup.open(registry, "vg"):
        t = threading.Thread(target=other)
        t.start()
        t.join(20)
        assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], VolumeError)
    assert str(errors[0]) == f"volume group vg: in use by pid {os.getpid()} (this process)"
    t = threading.Thread(target=other)  # and free again once closed
    t.start()
    t.join(20)
    assert len(errors) == 1


# ----- locks per volume, and commits from an open volume -------------------------------------------
def test_volumes_are_locked_one_by_one(registry, make_pvs):
    """A volume open for use (what a mount holds) locks that volume and, shared, its group:
    other volumes open and change freely, the open one and the whole group do not."""
    paths = new_group(registry, make_pvs, n=2)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.create_lv("a", 2 * MiB)
        vg.create_lv("b", 2 * MiB)
    with VolumeGroup.open(registry, "vg", hold=USE) as user:
        user.open_lv("a").write(0, b"mounted")
        with VolumeGroup.open(registry, "vg", hold=USE) as other:  # another mount, another volume
            other.open_lv("b").write(0, b"beside")
            with pytest.raises(InUseError, match="logical volume vg/a: in use by pid"):
                other.open_lv("a")
        with VolumeGroup.open(registry, "vg") as vg:
            vg.create_lv("c", MiB)
            vg.rename_lv("b", "b2")
            vg.remove_lv("c")
            before = state(registry, paths)
            for change in (lambda: vg.remove_lv("a"), lambda: vg.extend_lv("a", 4 * MiB),
                           lambda: vg.rename_lv("a", "z")):
                with pytest.raises(InUseError, match="logical volume vg/a: in use"):
                    change()
            assert state(registry, paths) == before
        for whole in (lambda vg: vg.remove(force=True), lambda vg: vg.rename("other"), lambda vg: vg.repair()):
            with VolumeGroup.open(registry, "vg") as vg, pytest.raises(InUseError, match="volume group vg: in use"):
                whole(vg)
        with pytest.raises(InUseError, match="volume group vg: in use"):
            with VolumeGroup.open(registry, "vg", hold=GROUP):
                pass
        assert state(registry, paths) == before
    with VolumeGroup.open(registry, "vg") as vg:  # all free once the user closed
        assert vg.open_lv("a").read(0, 7) == b"mounted" and vg.open_lv("b2").read(0, 6) == b"beside"
        vg.rename("renamed")


def test_a_commit_from_an_open_volume_keeps_a_change_made_meanwhile(registry, make_pvs):
    """A process with a volume open commits (here: opening a mirror with a leg's device gone
    marks the leg stale) after another process committed a new volume: it reads the newest
    document first, so the new volume stays and the sequence number only grows."""
    paths = new_group(registry, make_pvs, n=3)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.create_lv("m", 2 * MiB, mirror=True, pvs=paths[:2])
        leg1 = vg.meta.pv(vg.meta.lv("m").legs[1].segments[0].areas[0].pv).path
    registry.remove(leg1)  # the leg's device is away
    with VolumeGroup.open(registry, "vg", partial=True, hold=USE) as user:
        seq = user.meta.seq
        with VolumeGroup.open(registry, "vg", partial=True) as other:
            other.create_lv("new", MiB)
        olv = user.open_lv("m")  # marks leg 1 stale: a commit
        olv.write(0, b"degraded")
    meta = list_groups(registry)["vg"]
    assert meta.seq == seq + 2
    assert sorted(lv.name for lv in meta.lvs) == ["m", "new"]
    assert [leg.state for leg in meta.lv("m").legs] == ["in_sync", "stale"]


@pytest.mark.timeout(30)
def test_renaming_a_group_to_its_own_name_is_refused_at_once(registry, make_pvs):
    paths = new_group(registry, make_pvs, n=1)
    before = state(registry, paths)
    with VolumeGroup.open(registry, "vg", hold=GROUP) as vg, pytest.raises(UsageError, match="already named 'vg'"):
        vg.rename("vg")
    assert state(registry, paths) == before

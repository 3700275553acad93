"""Mirrors (RAID-1) of linear, striped and traxtent legs: both legs written, degraded operation
with a device missing, replacing the device and resynchronising, and a device that comes back
with stale metadata."""

from __future__ import annotations

import os
import random

import pytest
from conftest import MiB, head_hash, read_at

from traxfs.volume.device import create_image
from traxfs.volume.errors import MissingDeviceError, NoSpaceError, StaleDeviceError, UsageError
from traxfs.volume.group import VolumeGroup, list_groups

VG = "mvg"
LV = "m"
LV_SIZE = 6 * MiB
LAYOUTS = {
    "linear": {},
    "striped": {"stripe_unit": 64 * 1024},  # stripes default to half the devices: 2
    "traxtent": {},  # stripe unit = the devices' track unit (128 KiB here)
}


def pattern(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.fixture(params=sorted(LAYOUTS))
def mirror(request, registry, make_pvs):
    """A group of four image PVs holding a mirrored volume of the given layout, filled with data.
    Returns (registry, paths, shadow) where shadow is the volume's expected content."""
    layout = request.param
    paths = make_pvs(4, size=16 * MiB, unit=128 * 1024)
    VolumeGroup.create(registry, VG, paths, extent_size=MiB)
    with VolumeGroup.open(registry, VG) as vg:
        lv = vg.create_lv(LV, LV_SIZE, layout, mirror=True, **LAYOUTS[layout])
        assert lv.layout == layout and len(lv.legs) == 2
        assert lv.stripes == (1 if layout == "linear" else 2)
        leg_pvs = [{a.pv for s in leg.segments for a in s.areas} for leg in lv.legs]
        assert not leg_pvs[0] & leg_pvs[1], "the legs of a mirror must not share a device"
        olv = vg.open_lv(LV)
        shadow = bytearray(pattern(0, olv.size))
        olv.write(0, shadow)
        olv.flush()
    return registry, paths, shadow


def leg_paths(vg, leg: int) -> list[str]:
    return sorted({vg.meta.pv(a.pv).path for s in vg.meta.lv(LV).legs[leg].segments for a in s.areas})


def leg_bytes(vg, olv, leg: int, offset: int = 0, length: int | None = None) -> bytes:
    """Read one leg's copy straight from its devices' files, bypassing the volume manager."""
    length = olv.size - offset if length is None else length
    out = bytearray(length)
    for p in olv.legs[leg].pieces(offset, length):
        out[p.buf_offset : p.buf_offset + p.length] = read_at(vg.meta.pv(p.pv).path, p.dev_offset, p.length)
    return bytes(out)


def states(registry) -> list[str]:
    """Leg states as committed on disk."""
    return [leg.state for leg in list_groups(registry)[VG].lv(LV).legs]


def degraded_writes(olv, shadow: bytearray, seed: int) -> None:
    rnd = random.Random(seed)
    for _ in range(6):
        off = rnd.randrange(olv.size - 1)
        n = rnd.randint(1, min(700_000, olv.size - off))
        data = rnd.randbytes(n)
        olv.write(off, data)
        shadow[off : off + n] = data
    olv.flush()


def test_writes_reach_both_legs(mirror):
    registry, paths, shadow = mirror
    with VolumeGroup.open(registry, VG) as vg:
        olv = vg.open_lv(LV)
        assert olv.readable_legs() == [0, 1] and olv.writable_legs() == [0, 1]
        degraded_writes(olv, shadow, seed=5)  # (not degraded here: the same helper, both legs)
        for leg in (0, 1):
            assert leg_bytes(vg, olv, leg) == shadow, f"leg {leg} does not hold the data"
        for _ in range(4):  # reads alternate between the legs; each answer is the data
            assert olv.read(12345, 300_000) == shadow[12345 : 12345 + 300_000]
    assert states(registry) == ["in_sync", "in_sync"]


def test_durable_writes_reach_both_legs_directly(mirror):
    """``write_durable`` (the engine's log appends) goes to each leg's devices through their own
    durable writes, across stripe and extent boundaries, sector-aligned or not."""
    registry, paths, shadow = mirror
    with VolumeGroup.open(registry, VG) as vg:
        olv = vg.open_lv(LV)
        rnd = random.Random(9)
        for off, n in [(0, 512), (64 * 1024 - 512, 2048), (MiB - 1024, 4096), (olv.size - 512, 512),
                       *((rnd.randrange(olv.size // 512 - 600) * 512, rnd.randrange(1, 600) * 512)
                         for _ in range(10)), (1000, 777)]:
            data = rnd.randbytes(n)
            olv.write_durable(off, data)
            shadow[off : off + n] = data
        for leg in (0, 1):
            assert leg_bytes(vg, olv, leg) == shadow, f"leg {leg} does not hold the durable writes"
        with pytest.raises(UsageError, match="outside the volume"):
            olv.write_durable(olv.size - 512, bytes(1024))
        assert leg_bytes(vg, olv, 0, olv.size - 512) == shadow[-512:]
    assert states(registry) == ["in_sync", "in_sync"]


def test_extend_mirror_keeps_data_and_legs_apart(mirror):
    registry, paths, shadow = mirror
    with VolumeGroup.open(registry, VG) as vg:
        vg.extend_lv(LV, 16 * MiB)  # more than one device of a linear leg holds (14 extents)
        lv = vg.meta.lv(LV)
        leg_pvs = [{a.pv for s in leg.segments for a in s.areas} for leg in lv.legs]
        assert not leg_pvs[0] & leg_pvs[1]
        assert [sum(s.count for s in leg.segments) for leg in lv.legs] == [lv.extents, lv.extents]
        olv = vg.open_lv(LV)
        assert olv.read(0, len(shadow)) == shadow
        tail = pattern(3, olv.size - len(shadow))
        olv.write(len(shadow), tail)
        olv.flush()
        for leg in (0, 1):
            assert leg_bytes(vg, olv, leg) == shadow + tail


@pytest.mark.timeout(60)
def test_degraded_then_replace_and_resync(mirror, tmp_path):
    registry, paths, shadow = mirror
    with VolumeGroup.open(registry, VG) as vg:
        gone = leg_paths(vg, 1)[0]
        survivors = leg_paths(vg, 0)
    os.remove(gone)

    with pytest.raises(MissingDeviceError, match=gone):
        with VolumeGroup.open(registry, VG):
            pass
    with VolumeGroup.open(registry, VG, partial=True) as vg:
        assert any(gone in w for w in vg.warnings)
        olv = vg.open_lv(LV)
        assert vg.meta.lv(LV).legs[1].state == "stale"
        assert olv.readable_legs() == [0] and olv.writable_legs() == [0]
        assert olv.read(0, olv.size) == shadow
        degraded_writes(olv, shadow, seed=7)  # new data while degraded
        assert olv.read(0, olv.size) == shadow
        with pytest.raises(MissingDeviceError, match="missing"):
            vg.resync_lv(LV)  # nothing to copy onto yet
    assert states(registry) == ["in_sync", "stale"]

    fresh = str(tmp_path / "fresh.img")
    create_image(fresh, 16 * MiB).close()
    with VolumeGroup.open(registry, VG, partial=True) as vg:
        before = vg.open_lv(LV)
        assert before.read(0, LV_SIZE) == shadow  # still degraded after a reopen
        assert vg.replace_pv(gone, fresh) == [LV]
        degraded_writes(before, shadow, seed=8)  # a volume open across the replacement keeps working
        assert before.read(0, LV_SIZE) == shadow
        assert gone not in {p.path for p in vg.meta.pvs} and fresh in {p.path for p in vg.meta.pvs}
        assert vg.meta.lv(LV).legs[1].state == "stale"
        copied = vg.resync_lv(LV)
        assert copied == LV_SIZE
        assert [leg.state for leg in vg.meta.lv(LV).legs] == ["in_sync", "in_sync"]
        olv = vg.open_lv(LV)
        for leg in (0, 1):
            assert leg_bytes(vg, olv, leg) == shadow, f"leg {leg} differs after resync"
    assert states(registry) == ["in_sync", "in_sync"]
    with VolumeGroup.open(registry, VG) as vg:  # complete again: no partial needed
        assert vg.warnings == []

    # the proof: take away the side that never missed a write; the resynced side serves it all
    os.remove(survivors[0])
    with VolumeGroup.open(registry, VG, partial=True) as vg:
        olv = vg.open_lv(LV)
        assert olv.readable_legs() == [1]
        assert olv.read(0, olv.size) == shadow


@pytest.mark.timeout(60)
def test_device_comes_back_stale_then_repair_and_resync(mirror, tmp_path):
    registry, paths, shadow = mirror
    with VolumeGroup.open(registry, VG) as vg:
        back = leg_paths(vg, 1)[-1]
        other_side = leg_paths(vg, 0)
    away = str(tmp_path / "away.img")
    os.rename(back, away)
    with VolumeGroup.open(registry, VG, partial=True) as vg:
        olv = vg.open_lv(LV)
        degraded_writes(olv, shadow, seed=11)
    os.rename(away, back)  # the device reappears, carrying the metadata of before

    heads = {p: head_hash(p) for p in paths}
    with pytest.raises(StaleDeviceError) as e:
        with VolumeGroup.open(registry, VG):
            pass
    assert back in str(e.value) and "stale" in str(e.value)
    assert not any(p in str(e.value) for p in paths if p != back)
    assert {p: head_hash(p) for p in paths} == heads, "a refused open wrote metadata"

    with VolumeGroup.open(registry, VG, repair=True) as vg:
        assert back in vg.repair()
        olv = vg.open_lv(LV)
        assert vg.meta.lv(LV).legs[1].state == "stale"
        assert olv.readable_legs() == [0], "a stale leg must not be read before resync"
        assert leg_bytes(vg, olv, 1) != shadow, "the returning leg should really have missed writes"
        for _ in range(3):
            assert olv.read(0, olv.size) == shadow
        assert vg.resync_lv(LV) == LV_SIZE
        olv = vg.open_lv(LV)
        assert leg_bytes(vg, olv, 1) == shadow == leg_bytes(vg, olv, 0)
    assert states(registry) == ["in_sync", "in_sync"]

    with VolumeGroup.open(registry, VG) as vg:  # clean open, nothing to resync
        assert vg.warnings == [] and vg.resync_lv(LV) == 0
    os.remove(other_side[0])
    with VolumeGroup.open(registry, VG, partial=True) as vg:
        olv = vg.open_lv(LV)
        assert olv.readable_legs() == [1] and olv.read(0, olv.size) == shadow


def test_both_legs_missing_refuses_io(mirror):
    registry, paths, shadow = mirror
    with VolumeGroup.open(registry, VG) as vg:
        gone = [leg_paths(vg, 0)[0], leg_paths(vg, 1)[0]]
    for p in gone:
        os.remove(p)
    with VolumeGroup.open(registry, VG, partial=True) as vg:
        seq = vg.meta.seq
        with pytest.raises(MissingDeviceError) as e:
            vg.open_lv(LV)
        assert all(p in str(e.value) for p in gone)
        assert vg.meta.seq == seq


def test_replace_and_resync_refusals(registry, make_pvs, tmp_path):
    plain_dev, m0, m1 = paths = make_pvs(3, size=16 * MiB)
    VolumeGroup.create(registry, VG, paths, extent_size=MiB)
    with VolumeGroup.open(registry, VG) as vg:
        vg.create_lv("plain", 2 * MiB, pvs=[plain_dev])
        vg.create_lv(LV, 8 * MiB, mirror=True, pvs=[m0, m1])
        with pytest.raises(UsageError, match="not a mirror"):
            vg.resync_lv("plain")
        with pytest.raises(UsageError, match="is present"):
            vg.replace_pv(m0, plain_dev)
        with pytest.raises(UsageError, match="not a device"):
            vg.replace_pv("/no/such/device", plain_dev)
    small = _fresh(tmp_path, "small.img", 8 * MiB)
    spare = _fresh(tmp_path, "spare.img", 16 * MiB)
    os.remove(plain_dev)
    with VolumeGroup.open(registry, VG, partial=True) as vg:
        seq = vg.meta.seq
        with pytest.raises(UsageError, match="plain"):  # its only copy went with the device
            vg.replace_pv(plain_dev, spare)
        with pytest.raises(MissingDeviceError, match=plain_dev):
            vg.open_lv("plain")
        assert vg.meta.seq == seq
        vg.remove_lv("plain")
        assert vg.replace_pv(plain_dev, small) == []  # now it held nothing: any device will do
    os.remove(m1)
    with VolumeGroup.open(registry, VG, partial=True) as vg:
        seq = vg.meta.seq
        with pytest.raises(NoSpaceError, match="tiny.img"):  # 6 extents; the leg had 8 in use
            vg.replace_pv(m1, _fresh(tmp_path, "tiny.img", 8 * MiB))
        assert vg.meta.seq == seq and m1 in {p.path for p in vg.meta.pvs}
        assert vg.replace_pv(m1, spare) == [LV]
        assert vg.resync_lv(LV) == 8 * MiB


def _fresh(tmp_path, name: str, size: int) -> str:
    path = str(tmp_path / name)
    create_image(path, size).close()
    return path

"""Volume groups on real block devices: loop devices opened with O_DIRECT through BlockDevice.

Unaligned offsets and lengths exercise the read-modify-write path; striped and mirrored layouts
spread requests over several devices; a loop device switched read-only is a real device that
fails writes, which a mirror must survive.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading

import pytest
from conftest import IO_PHASES, MiB, read_at
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traxfs.volume.device import BlockDevice, create_image
from traxfs.volume.errors import StaleDeviceError
from traxfs.volume.group import USE, VolumeGroup, list_groups
from traxfs.volume.scan import pv_create

VG = "loopvg"
LOOP_SIZE = 24 * MiB


def pattern(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.fixture
def loop_vg(registry, loop_attach, tmp_path):
    """Four loop devices over sparse image files, labelled and grouped. Returns
    (registry, {loop device: backing image})."""
    backing = {}
    for i in range(4):
        img = str(tmp_path / f"loop{i}.img")
        create_image(img, LOOP_SIZE).close()
        backing[loop_attach(img)] = img
    for dev in backing:
        pv_create(registry, dev, unit=128 * 1024)
    VolumeGroup.create(registry, VG, list(backing), extent_size=MiB)
    with VolumeGroup.open(registry, VG) as vg:
        vg.create_lv("mir", 4 * MiB, "striped", mirror=True, stripes=2, stripe_unit=64 * 1024)
        vg.create_lv("str", 6 * MiB, "striped", stripes=3, stripe_unit=64 * 1024)
        vg.create_lv("trx", 4 * MiB, "traxtent", stripes=2)
        vg.create_lv("lin", 30 * MiB)  # more than one device holds: two segments
        assert len(vg.meta.lv("lin").legs[0].segments) >= 2
    return registry, backing


@pytest.mark.timeout(30)
def test_loop_pvs_are_opened_as_block_devices(loop_vg):
    registry, backing = loop_vg
    with VolumeGroup.open(registry, VG) as vg:
        assert vg.warnings == []
        assert sorted(p.path for p in vg.meta.pvs) == sorted(backing)
        for dev in vg.devices.values():
            assert isinstance(dev, BlockDevice) and dev.size == LOOP_SIZE and dev.block_size >= 512


@st.composite
def unaligned_writes(draw, size: int):
    ops = []
    for _ in range(draw(st.integers(1, 5))):
        off = draw(st.integers(0, size // 512 - 1)) * 512 + draw(st.sampled_from([0, 1, 7, 255, 511]))
        off = min(off, size - 1)
        length = draw(st.one_of(st.integers(1, 1100), st.integers(1, min(600 * 1024, size - off))))
        ops.append((off, min(length, size - off), draw(st.integers(0, 2**32))))
    return ops


@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", ["lin", "str", "trx", "mir"])
@settings(max_examples=6, phases=IO_PHASES,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_unaligned_writes_read_back_on_loop_devices(loop_vg, name, data):
    registry, backing = loop_vg
    with VolumeGroup.open(registry, VG) as vg:
        olv = vg.open_lv(name)
        window = min(olv.size, 8 * MiB)  # keep the whole-volume comparison cheap
        shadow = bytearray(olv.read(0, window))
        for off, length, seed in data.draw(unaligned_writes(window)):
            buf = pattern(seed, length)
            olv.write(off, buf)
            shadow[off : off + length] = buf
            lo, hi = max(0, off - 600), min(window, off + length + 600)  # neighbours survive the RMW
            assert olv.read(lo, hi - lo) == shadow[lo:hi]
        olv.flush()
        # the bytes are on the devices, not in some cache: read each leg through the backing files
        for leg in range(len(olv.legs)):
            got = bytearray(window)
            for p in olv.legs[leg].pieces(0, window):
                got[p.buf_offset : p.buf_offset + p.length] = read_at(
                    backing[vg.meta.pv(p.pv).path], p.dev_offset, p.length)
            assert got == shadow, f"leg {leg} of {name} on the backing files differs"
    with VolumeGroup.open(registry, VG) as vg:
        assert vg.open_lv(name).read(0, window) == shadow


@pytest.mark.timeout(60)
def test_concurrent_unaligned_writers_in_the_same_sectors(loop_vg):
    """Eight threads write interleaved 37-byte slices of the same few sectors: the RMW lock must
    keep every slice (no writer may put back a block it read before another's write)."""
    registry, _ = loop_vg
    with VolumeGroup.open(registry, VG) as vg:
        olv = vg.open_lv("str")
        base, slice_len, threads, rounds = 64 * 1024 - 1000, 37, 8, 30  # straddles a stripe edge
        span = slice_len * threads * rounds
        olv.write(base, bytes(span))
        errors = []

        def writer(t: int) -> None:
            try:
                for r in range(rounds):
                    off = base + (r * threads + t) * slice_len
                    olv.write(off, bytes([t + 1]) * slice_len)
            except BaseException as e:  # noqa: B036 - reported by the test
                errors.append(e)

        ts = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert not errors
        expected = b"".join(bytes([t + 1]) * slice_len for _ in range(rounds) for t in range(threads))
        assert olv.read(base, span) == expected


def _setro(dev: str, ro: bool) -> None:
    subprocess.run(["blockdev", "--setro" if ro else "--setrw", dev], check=True, timeout=30)


@pytest.mark.timeout(60)
def test_mirror_survives_a_device_that_fails_writes(loop_vg):
    registry, backing = loop_vg
    with VolumeGroup.open(registry, VG) as vg:
        lv = vg.meta.lv("mir")
        failing = vg.meta.pv(lv.legs[1].segments[0].areas[0].pv).path
        olv = vg.open_lv("mir")
        shadow = bytearray(pattern(1, olv.size))
        olv.write(0, shadow)
        olv.flush()
        _setro(failing, True)
        try:
            data = pattern(2, 300_001)
            olv.write(1001, data)  # leg 1 fails on the read-only device; leg 0 takes it
            shadow[1001 : 1001 + len(data)] = data
            assert lv.legs[1].state == "stale" and lv.legs[0].state == "in_sync"
            assert olv.readable_legs() == [0]
            assert olv.read(0, olv.size) == shadow
            more = pattern(3, 5000)
            olv.write(olv.size - 5000, more)  # and later writes simply skip the stale leg
            shadow[-5000:] = more
            olv.flush()
        finally:
            _setro(failing, False)
    with pytest.raises(StaleDeviceError, match=failing):  # it missed the commit marking it stale
        with VolumeGroup.open(registry, VG):
            pass
    with VolumeGroup.open(registry, VG, repair=True) as vg:
        assert failing in vg.repair()
        assert [leg.state for leg in vg.meta.lv("mir").legs] == ["in_sync", "stale"]
        assert vg.open_lv("mir").read(0, len(shadow)) == shadow
        assert vg.resync_lv("mir") == len(shadow)
    assert [leg.state for leg in list_groups(registry)[VG].lv("mir").legs] == ["in_sync", "in_sync"]
    with VolumeGroup.open(registry, VG) as vg:
        olv = vg.open_lv("mir")
        for leg in (0, 1):
            got = bytearray(olv.size)
            for p in olv.legs[leg].pieces(0, olv.size):
                got[p.buf_offset : p.buf_offset + p.length] = read_at(
                    backing[vg.meta.pv(p.pv).path], p.dev_offset, p.length)
            assert got == shadow, f"leg {leg} differs after resync"


@pytest.mark.timeout(60)
def test_a_failed_leg_is_recorded_after_a_change_made_meanwhile(loop_vg):
    """The mount's case: a volume open for use (the group's metadata not locked) loses a mirror
    leg after another process created a volume; recording the failure re-reads the newest
    document first, so the new volume survives the commit."""
    registry, backing = loop_vg
    with VolumeGroup.open(registry, VG, hold=USE) as user:
        lv = user.meta.lv("mir")
        failing = user.meta.pv(lv.legs[1].segments[0].areas[0].pv).path
        olv = user.open_lv("mir")
        seq = user.meta.seq
        with VolumeGroup.open(registry, VG) as other:
            other.create_lv("new", MiB)
        _setro(failing, True)
        try:
            olv.write(0, pattern(4, 70_000))  # leg 1 fails: marked stale in a commit from this open
        finally:
            _setro(failing, False)
        assert olv.readable_legs() == [0]
    meta = list_groups(registry)[VG]
    assert meta.seq == seq + 2 and "new" in {v.name for v in meta.lvs}
    assert [leg.state for leg in meta.lv("mir").legs] == ["in_sync", "stale"]


HOLD_EXCL = "import os, sys; os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL); print('held', flush=True); sys.stdin.read()"


@pytest.mark.timeout(60)
def test_mkfs_of_a_block_device_identifies_and_respects_the_kernel(tmp_path, loop_attach, capsys):
    """mkfs of a loop device carrying a PV label is refused by name; with --force it is still
    refused while another program holds the device open exclusively (O_EXCL, as the kernel's
    own users do), and done once it is free."""
    from traxfs.tools.cli import main

    img = str(tmp_path / "b.img")
    create_image(img, 32 * MiB).close()
    dev = loop_attach(img)
    home = ["--home", str(tmp_path / "home")]
    assert main([*home, "pv", "create", dev]) == 0
    before = read_at(img, 0, 2 * MiB)
    capsys.readouterr()
    assert main([*home, "mkfs", dev]) == 1
    assert f"{dev}: unused traxfs physical volume (no group yet); use --force" in capsys.readouterr().err
    holder = subprocess.Popen([sys.executable, "-c", HOLD_EXCL, dev], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main([*home, "mkfs", dev, "--force"]) == 1
        assert f"{dev}: in use by the kernel" in capsys.readouterr().err
    finally:
        holder.stdin.close()
        holder.wait(10)
    assert read_at(img, 0, 2 * MiB) == before
    assert main([*home, "mkfs", dev, "--force"]) == 0
    assert main([*home, "fsck", dev]) == 0

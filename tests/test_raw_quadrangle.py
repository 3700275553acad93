"""Raw engine pages on a quadrangle volume of simulated Atlas 10K III disks: a page's
equivalents (the same place in the other blocks of its quadrangle column) come from the device
contract, and reading one of each is one semi-sequential batch on one disk; on a flat device a
page is its own only equivalent and the same calls still work."""

from __future__ import annotations

import pytest
from conftest import QUAD_DISK, MiB

from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.filesystem import FileSystem
from traxfs.volume.device import create_image
from traxfs.volume.simdevice import SimulatedDevice

pytestmark = pytest.mark.timeout(120)
SPEC = QUAD_DISK


def _claimed(fs, pages: int) -> int:
    """A run of pages allocated and claimed for raw bytes in one committed transaction."""
    tx = fs.e.begin()
    first = fs.e.alloc_region(tx, pages, 1)
    fs.e.raw.claim(first, pages)
    fs.e.commit(tx)
    return first


def test_equivalent_pages_are_one_batch_on_one_disk(quad_fs):
    fs, vg, lv, olv = quad_fs
    raw, d = fs.e.raw, lv.quadrangle.depth
    assert d > 1 and lv.quadrangle.block * 512 == PAGE_SIZE
    group = 2 * lv.quadrangle.width * d  # pages of one quadrangle stripe (p = 2)
    first = _claimed(fs, 2 * group)
    inside = [p for p in range(first, first + 2 * group)
              if all(first <= e < first + 2 * group for e in raw.equivalents(p)) and len(raw.equivalents(p)) > 1]
    assert len(inside) >= group  # a whole quadrangle stripe lies inside two stripes' worth of pages
    page = inside[len(inside) // 2]
    eq = raw.equivalents(page)
    assert len(eq) == d and page in eq and eq == sorted(eq)
    assert all(b - a == 2 * lv.quadrangle.width for a, b in zip(eq, eq[1:], strict=False))  # p·w pages apart
    for e in raw.equivalents(eq[-1]):
        assert e in eq  # the relation is symmetric: one set per quadrangle column
    # the pages sit on d different tracks of one disk, at the same place of each block
    where = [raw.locate(e * PAGE_SIZE, PAGE_SIZE)[2] for e in eq]
    assert all(len(w) == 1 for w in where) and len({w[0][1] for w in where}) == 1
    spt = SPEC.zones[0].sectors_per_track
    assert len({w[0][2] // 512 // spt for w in where}) == d
    data = {e: bytes([e % 251]) * PAGE_SIZE for e in eq}
    for e, b in data.items():
        raw.write(e * PAGE_SIZE, b)
    (dev,) = {vg.devices[pv] for pv in lv.pvs() if vg.devices[pv].path == where[0][0][1]}
    assert isinstance(dev, SimulatedDevice)
    before = dev.stats.requests
    got = raw.read_batch([(e * PAGE_SIZE, PAGE_SIZE) for e in eq])
    assert got == [data[e] for e in eq]
    assert dev.stats.requests - before == d and len(dev.last) == d  # d requests, served as one batch


def test_a_flat_device_has_no_equivalents(tmp_path):
    dev = create_image(str(tmp_path / "flat.img"), 32 * MiB)
    FileSystem.mkfs(dev)
    fs = FileSystem.open(dev)
    try:
        raw = fs.e.raw
        first = _claimed(fs, 4)
        assert raw.equivalents(first) == [first]
        raw.write(first * PAGE_SIZE, b"a" * PAGE_SIZE)
        raw.write((first + 2) * PAGE_SIZE, b"b" * 10)
        assert raw.read_batch([((first + 2) * PAGE_SIZE, 10), (first * PAGE_SIZE, 5)]) == [b"b" * 10, b"a" * 5]
        with pytest.raises(ValueError, match="outside the page area"):
            raw.read_batch([(-PAGE_SIZE, 10)])
    finally:
        fs.close()
        dev.close()

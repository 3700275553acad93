"""Groups of data pages marked for overwrites (``fs/datamarks.py``, format 5): the first
overwrite in a group forces the log once, the next ones none; a crash that loses their intents
leaves pages whose bytes match no logged sum, and the next open settles them to what is on
disk — no read fails, fsck is clean; marks go when idle, beyond the bound, and at unmount."""

from __future__ import annotations

import random
import threading

import pytest
from conftest import MiB, leg_offset, leg_page

from traxfs.fs import datamarks
from traxfs.fs.datamap import DataMap
from traxfs.fs.datasums import GROUP
from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.filesystem import ROOT_INO, FileSystem
from traxfs.fs.fsck import fsck
from traxfs.volume.device import ImageFileDevice

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def dev(tmp_path):
    d = ImageFileDevice(str(tmp_path / "marks.img"), 64 * MiB, create=True)
    FileSystem.mkfs(d, log_size=16 * MiB)
    yield d
    d.close()


def _file(fs: FileSystem, pages: int, seed: int = 1) -> tuple[int, bytearray]:
    data = bytearray(random.Random(seed).randbytes(pages * PAGE_SIZE))
    ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).ino
    fs.write(ino, 0, bytes(data))
    fs.fsync()
    return ino, data


def _overwrite(fs: FileSystem, ino: int, data: bytearray, page: int, fill: int) -> None:
    chunk = bytes([fill]) * 1000  # part of a page: its summed bytes change (an overwrite)
    fs.write(ino, page * PAGE_SIZE + 100, chunk)
    data[page * PAGE_SIZE + 100 : page * PAGE_SIZE + 1100] = chunk


def test_only_the_first_overwrite_in_a_group_forces_the_log(dev):
    fs = FileSystem.open(dev)
    try:
        ino, data = _file(fs, 40)
        log = fs.e.log.stats
        _overwrite(fs, ino, data, 3, 0xA1)
        assert fs.status()["data"]["groups_marked"] == 1
        flushes = log["flushes"]
        for k in range(20):
            _overwrite(fs, ino, data, (7 * k) % 40, k)
        assert log["flushes"] == flushes  # twenty overwrites, no log write
        assert fs.status()["data"]["groups_marked"] == 1
        assert fs.read(ino, 0, len(data)) == data
    finally:
        fs.close()


def test_a_crash_that_loses_the_intents_leaves_what_is_on_disk_readable(dev):
    fs = FileSystem.open(dev)
    ino, data = _file(fs, 40)
    before = bytes(data)
    _overwrite(fs, ino, data, 1, 0xB1)  # marks the group (forced)
    for page, fill in ((5, 0xB5), (9, 0xB9), (30, 0xBE)):  # their intents only in the log buffer
        _overwrite(fs, ino, data, page, fill)
    fs.crash()  # the log buffer is lost; the bytes are in the image (written in place)
    fs = FileSystem.open(dev)
    try:
        got = fs.read(ino, 0, len(data))  # raises EIO if a page matched no sum
        assert got == data  # every overwrite landed (an image file keeps what was written)
        assert got != before
        stats = fs.status()["data"]
        assert stats["marks_settled"] == 1 and stats["unlogged_recomputed"] >= 3
        assert len(list(fs.t["datamarked"].items())) == 0
        assert not fsck(fs).problems
    finally:
        fs.close()


def test_marks_go_when_idle_beyond_the_bound_and_at_unmount(dev, monkeypatch):
    fs = FileSystem.open(dev)
    try:
        ino, data = _file(fs, 5 * GROUP // 2 + 10)  # pages in three groups (device pages: about that)
        groups = sorted({p // GROUP for p in range(0, len(data) // PAGE_SIZE, 17)})
        for page in range(0, len(data) // PAGE_SIZE, 17):
            _overwrite(fs, ino, data, page, page % 251)
        marks = fs.data.marks
        assert marks.marked() >= 2 and len(groups) >= 2
        monkeypatch.setattr(datamarks, "LOOK_EVERY", 0.0)
        monkeypatch.setattr(datamarks, "MAX_MARKS", 1)
        fs.inodes.flush()  # logs the overwrites' sums: until they are logged, no group is unmarked
        assert marks.marked() >= 2
        fs.inodes.flush()
        assert marks.marked() == 1  # the oldest went
        monkeypatch.setattr(datamarks, "MARK_IDLE", 0.0)
        fs.inodes.flush()
        assert marks.marked() == 0 and len(list(fs.t["datamarked"].items())) == 0
        monkeypatch.undo()
        _overwrite(fs, ino, data, 2, 0xC2)
        assert marks.marked() == 1
    finally:
        fs.close()
    fs = FileSystem.open(dev)  # a clean unmount left no mark: nothing to settle
    try:
        assert len(list(fs.t["datamarked"].items())) == 0
        assert fs.status()["data"]["marks_settled"] == 0
        assert fs.read(ino, 0, len(data)) == data
    finally:
        fs.close()


def test_a_group_whose_overwrite_is_in_flight_stays_marked(dev, monkeypatch):
    """An overwrite in a marked group keeps its intent in memory until the inode is logged; an
    unmark logged meanwhile, then a crash once its bytes are on disk, would leave the page with
    its old sum and new bytes (EIO). The group stays marked while it holds such a sum."""
    fs = FileSystem.open(dev)
    ino, data = _file(fs, 40)
    _overwrite(fs, ino, data, 1, 0xD1)  # marks the group
    fs.fsync()  # the inode and its sums logged: nothing held
    gate, arrived = threading.Event(), threading.Event()
    real = DataMap.write_plan

    def held(dm, plan):
        if plan.intents and not gate.is_set():
            arrived.set()
            assert gate.wait(30)
        return real(dm, plan)

    monkeypatch.setattr(DataMap, "write_plan", held)
    writer = threading.Thread(target=_overwrite, args=(fs, ino, data, 6, 0xD6))
    writer.start()
    try:
        assert arrived.wait(30)  # its intent held in memory, its bytes not written yet
        monkeypatch.setattr(datamarks, "LOOK_EVERY", 0.0)
        monkeypatch.setattr(datamarks, "MARK_IDLE", 0.0)
        fs.inodes.flush()  # idle long enough, but holding an unlogged sum
        assert fs.data.marks.marked() == 1
        fs.e.make_durable()
    finally:
        gate.set()
        writer.join(30)
    fs.crash()  # the bytes are on disk, their sum was never logged
    fs = FileSystem.open(dev)
    try:
        assert fs.read(ino, 0, len(data)) == data
        assert fs.status()["data"]["unlogged_recomputed"] >= 1
    finally:
        fs.close()


def test_on_a_mirror_every_leg_of_a_marked_page_gets_the_chosen_copy(mirror_fs):
    """An overwrite that reached one leg of a mirror only, in a marked group: after the crash the
    settled page is the same on both legs (a copy matching its logged sum, else the first)."""
    vg, lv = mirror_fs
    fs = FileSystem.open(lv)
    ino, data = _file(fs, 40)
    _overwrite(fs, ino, data, 1, 0xE1)  # marks the group
    _overwrite(fs, ino, data, 5, 0xE5)  # its intent in memory only; the bytes on both legs
    _, phys, _ = fs.data.all_extents(ino)[0]
    base = fs.e.sb.pages_offset

    def at(page: int) -> int:
        return base + (phys + page) * PAGE_SIZE

    fs.crash()
    path, off = leg_offset(vg, lv, 0, at(9))  # an overwrite of page 9 that reached leg 0 only
    with open(path, "r+b") as f:
        f.seek(off + 100)
        f.write(b"\xee" * 1000)
    assert leg_page(vg, lv, 0, at(9)) != leg_page(vg, lv, 1, at(9))
    fs = FileSystem.open(lv)
    try:
        assert fs.read(ino, 0, len(data)) == data  # page 9: leg 1 matched its sum
        for page in (1, 5, 9):
            assert leg_page(vg, lv, 0, at(page)) == leg_page(vg, lv, 1, at(page))
        assert fs.status()["data"]["unlogged_recomputed"] >= 1  # page 5
    finally:
        fs.close()

"""Removed files destroyed off the request path (fs/reaper.py): what a user can see is settled
before it is seen, the work is batched, and a crash with a backlog loses nothing.

In process the kernel's part is played by hand: a lookup reference taken (``ref``), the name
removed, the reference dropped (``unref``), the inode handed over (``collect_later``) as the
FUSE adapter's FORGET does. Through a real mount: ``rm`` then ``df``, and a SIGKILL right after
a burst of ``rm``.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from fsmount import traxfs_mount
from waiting import wait_for

from traxfs.fs import reaper as reaper_module
from traxfs.fs.errors import FsError
from traxfs.fs.filesystem import FileSystem
from traxfs.fs.fsck import check_device
from traxfs.fs.fuse.operations import TraxOperations
from traxfs.fs.keys import ino_key
from traxfs.volume.device import ImageFileDevice

pytestmark = pytest.mark.timeout(180)

MiB = 1 << 20


def _fs(path: Path, checking: bool = False) -> tuple[FileSystem, ImageFileDevice]:
    """The filesystem on ``path``; ``checking``: as found, no orphan destroyed by the open."""
    dev = ImageFileDevice(str(path))
    return FileSystem.open(dev, checking=checking), dev


def _new_fs(path: Path) -> tuple[FileSystem, ImageFileDevice]:
    dev = ImageFileDevice(str(path), 128 * MiB, create=True)
    FileSystem.mkfs(dev)
    return FileSystem.open(dev), dev


def _files(fs: FileSystem, n: int, size: int = 5000) -> tuple[int, list[int]]:
    """A directory of ``n`` files of ``size`` bytes, each referenced as a kernel lookup would."""
    d = fs.mkdir(1, b"d", 0o755, 0, 0).ino
    inos = []
    for i in range(n):
        node = fs.create(d, b"f%d" % i, 0o100644, 0, 0)
        fs.write(node.ino, 0, bytes([i % 251]) * size)
        fs.ref(node.ino)
        inos.append(node.ino)
    fs.inodes.flush()
    return d, inos


def _remove(fs: FileSystem, d: int, inos: list[int]) -> None:
    """``rm`` of every file, then the kernel's FORGETs."""
    for i in range(len(inos)):
        fs.unlink(d, b"f%d" % i)
    for ino in inos:
        assert fs.unref(ino)
        fs.collect_later(ino)


def _gone(fs: FileSystem, inos: list[int]) -> bool:
    return all(fs.t["inodes"].get(ino_key(i)) is None and fs.t["orphans"].get(ino_key(i)) is None for i in inos)


def test_statfs_counts_removed_files_free_and_the_work_is_batched(tmp_path: Path) -> None:
    """``statfs`` right after the FORGETs counts every removed page free (it waits for the
    reaper), and 96 files take a handful of transactions, not one each."""
    fs, dev = _new_fs(tmp_path / "fs.img")
    try:
        free0 = fs.statfs().blocks_free
        d, inos = _files(fs, 96)
        assert fs.statfs().blocks_free < free0 - 96
        before = fs.stats["transactions"]
        _remove(fs, d, inos)
        assert fs.reaper.pending() > 0  # handed over, not destroyed by the caller
        freed = fs.statfs().blocks_free
        assert fs.reaper.pending() == 0 and _gone(fs, inos)
        destroys = fs.stats["transactions"] - before - 96  # one per unlink (the files are referenced)
        assert destroys <= 96 // reaper_module.BATCH + 3, destroys  # (+ the flusher's, maybe)
        assert free0 - 4 <= freed <= free0 + 4  # (quarantined pages count free: see alloc.py)
        fs.rmdir(1, b"d")
    finally:
        fs.close()
        dev.close()
    dev = ImageFileDevice(str(tmp_path / "fs.img"))
    try:
        assert check_device(dev, repair=False, where="fs.img").exit_code == 0
    finally:
        dev.close()


def test_a_snapshot_taken_after_rm_holds_none_of_the_removed_pages(tmp_path: Path) -> None:
    fs, dev = _new_fs(tmp_path / "fs.img")
    try:
        d, inos = _files(fs, 40, size=20000)
        _remove(fs, d, inos)
        snap = fs.snapshots.create(b"after")
        assert _gone(fs, inos)
        assert fs.snapshots.unique_pages(snap.epoch) == 0
    finally:
        fs.close()
        dev.close()


def test_a_full_backlog_is_destroyed_by_the_caller(tmp_path: Path, monkeypatch) -> None:
    fs, dev = _new_fs(tmp_path / "fs.img")
    try:
        monkeypatch.setattr(reaper_module, "BACKLOG", 0)
        d, inos = _files(fs, 5)
        for i in range(5):
            fs.unlink(d, b"f%d" % i)
            assert fs.unref(inos[i])
            fs.collect_later(inos[i])
            assert _gone(fs, inos[: i + 1])  # at once, in this thread
    finally:
        fs.close()
        dev.close()


def test_a_clean_close_drains_the_backlog(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(reaper_module, "GATHER", 60.0)  # the thread would wait for a full batch
    fs, dev = _new_fs(tmp_path / "fs.img")
    d, inos = _files(fs, 7)
    _remove(fs, d, inos)
    assert fs.reaper.pending() == 7
    fs.close()
    dev.close()
    fs, dev = _fs(tmp_path / "fs.img", checking=True)
    try:
        assert _gone(fs, inos)  # destroyed by the close, not left to the next open
    finally:
        fs.close()
        dev.close()


def test_a_crash_with_a_backlog_leaves_orphans_the_next_open_destroys(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(reaper_module, "GATHER", 60.0)
    fs, dev = _new_fs(tmp_path / "fs.img")
    free0 = fs.statfs().blocks_free
    d, inos = _files(fs, 7, size=40000)
    _remove(fs, d, inos)
    fs.e.make_durable()  # the unlinks (and their orphan records) durable, the destruction not begun
    assert fs.reaper.pending() == 7
    fs.crash()
    dev.close()
    fs, dev = _fs(tmp_path / "fs.img", checking=True)
    try:
        assert not any(_gone(fs, [ino]) for ino in inos)  # orphans on the image
    finally:
        fs.close()
        dev.close()
    fs, dev = _fs(tmp_path / "fs.img")
    try:
        assert _gone(fs, inos)  # destroyed by the open (the orphans tree held them)
        assert free0 - 4 <= fs.statfs().blocks_free
    finally:
        fs.close()
        dev.close()


@pytest.mark.timeout(300)
def test_df_right_after_rm_and_a_kill_after_a_burst_of_rm(tmp_path: Path) -> None:
    """Through a real mount: ``df`` right after ``rm`` of 300 files counts their space free;
    a SIGKILL right after a second burst of ``rm`` loses nothing: the next mount frees the rest,
    and fsck finds the image clean."""
    with traxfs_mount(tmp_path, size=256 * MiB) as m:
        for burst in ("a", "b"):
            (m.mp / burst).mkdir()
            for i in range(300):
                (m.mp / burst / f"f{i}").write_bytes(os.urandom(9000))
        os.sync()
        st = os.statvfs(m.mp)
        full = st.f_bfree
        for i in range(300):
            os.unlink(m.mp / "a" / f"f{i}")
        # each file held 3 pages; the FORGETs follow the unlinks, then the reaper frees them
        wait_for(lambda: os.statvfs(m.mp).f_bfree >= full + 900, "df to count the removed files free")
        for i in range(300):
            os.unlink(m.mp / "b" / f"f{i}")
        fd = os.open(m.mp / "b", os.O_RDONLY)
        try:
            os.fsync(fd)  # the unlinks durable; their files' destruction in the reaper's hands
        finally:
            os.close(fd)
        m.kill()
        m.start()
        wait_for(lambda: os.statvfs(m.mp).f_bfree >= full + 1800,
                 lambda: f"the next mount to free the rest: {os.statvfs(m.mp).f_bfree - full} pages more free, "
                         f"{len(os.listdir(m.mp / 'b'))} files left")
        assert os.listdir(m.mp / "b") == []


def test_an_enospc_while_removed_files_wait_is_tried_again_once_they_are_freed(tmp_path: Path, monkeypatch) -> None:
    """The FUSE adapter's retry: a write that finds no room while a removed file's pages wait
    for the reaper succeeds (the filesystem alone refuses it: the pages are not free yet)."""
    monkeypatch.setattr(reaper_module, "GATHER", 60.0)  # the removed file stays in the backlog
    fs, dev = _new_fs(tmp_path / "fs.img")
    try:
        ops = TraxOperations(fs)
        new = fs.create(1, b"new", 0o100644, 0, 0)
        big = fs.create(1, b"big", 0o100644, 0, 0)
        fs.ref(big.ino)
        chunk, off = bytes(MiB), 0
        with pytest.raises(FsError) as full:
            while True:
                fs.write(big.ino, off, chunk)
                off += len(chunk)
        assert full.value.errno == errno.ENOSPC and off > 64 * MiB
        fs.unlink(1, b"big")
        ops.ll_forget([(big.ino, 1)])  # the kernel's FORGET: the inode handed to the reaper
        assert fs.reaper.pending() == 1
        with pytest.raises(FsError) as refused:
            fs.write(new.ino, 0, bytes(16 * MiB))
        assert refused.value.errno == errno.ENOSPC
        assert ops._call(fs.write, new.ino, 0, bytes(16 * MiB)) == 16 * MiB
        assert fs.reaper.pending() == 0 and fs.getattr(new.ino).size == 16 * MiB
    finally:
        fs.close()
        dev.close()


def test_a_batch_frees_neighbouring_files_pages_as_one_run(tmp_path: Path, monkeypatch) -> None:
    """Small files written one after the other sit side by side on the device: a batch frees
    them as a few long runs (``DataMap.free_runs``), and every page comes back free."""
    fs, dev = _new_fs(tmp_path / "fs.img")
    try:
        d, inos = _files(fs, 24, size=4096)
        held = sorted(fs.data.all_extents(ino)[0][1] for ino in inos)
        assert held == list(range(held[0], held[0] + 24))  # (as the allocator laid them out)
        freed: list[tuple[int, int]] = []
        real = fs.e.free_region
        monkeypatch.setattr(fs.e, "free_region", lambda tx, first, count: (freed.append((first, count)),
                                                                             real(tx, first, count)))
        free0 = fs.statfs().blocks_free
        _remove(fs, d, inos)
        assert fs.statfs().blocks_free == free0 + 24
        assert (held[0], 24) in freed and len(freed) <= 3, freed  # (+ B+tree pages a batch may free)
    finally:
        fs.close()
        dev.close()


def test_a_batch_that_fails_is_destroyed_inode_by_inode(tmp_path: Path, monkeypatch, caplog) -> None:
    """One inode whose destruction fails keeps no other's space: the batch's transaction is
    rolled back and each inode destroyed in its own; the failing one stays an orphan."""
    fs, dev = _new_fs(tmp_path / "fs.img")
    try:
        d, inos = _files(fs, 10)
        bad = inos[3]
        real = fs.lifetime._free

        def failing(ftx, node, *rest):
            if node.ino == bad:
                raise OSError(5, "injected: a damaged page")
            return real(ftx, node, *rest)

        monkeypatch.setattr(fs.lifetime, "_free", failing)
        _remove(fs, d, inos)
        fs.settle()
        assert _gone(fs, [i for i in inos if i != bad])
        assert fs.t["orphans"].get(ino_key(bad)) is not None
        assert f"destroying removed inode {bad}" in caplog.text
    finally:
        monkeypatch.undo()
        fs.close()
        dev.close()

"""Space accounting through a real mount: what ``df`` and ``du`` say, and when freed space can
be used again.

* space freed by ``rm`` is usable at once, even while the freeing commit is not yet durable
  (an allocation that finds no room forces the log and takes the freed pages);
* a file takes its size rounded up to pages once closed: preallocation past the end is given
  back at the last close, so ``st_blocks`` and ``statfs`` agree with what files hold;
* ``st_blocks`` counts allocated pages, so a sparse file shows what it really holds.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest
from fsmount import traxfs_mount

from traxfs.fs.filesystem import ROOT_INO, FileSystem
from traxfs.fs.fsck import check_device
from traxfs.volume.device import ImageFileDevice

pytestmark = pytest.mark.timeout(180)

MiB = 1 << 20
PAGE = 4096


def _fill(path: Path, chunk: bytes) -> int:
    """Write ``chunk`` after ``chunk`` to ``path`` until the filesystem is full; bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                written += f.write(chunk)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    return written


def _free_bytes(mp: Path) -> int:
    st = os.statvfs(mp)
    return st.f_bfree * st.f_frsize


def test_space_freed_by_rm_is_usable_at_once(tmp_path: Path) -> None:
    """With a 30 s commit interval the rm's commit is not durable for a while; the write that
    needs its pages must not fail with ENOSPC meanwhile (issue 12, item 6)."""
    with traxfs_mount(tmp_path, size=64 * MiB, args=("--commit-interval", "30")) as m:
        big = os.urandom(MiB)
        (m.mp / "a").write_bytes(big * 24)
        _fill(m.mp / "b", big)
        os.sync()
        full = _free_bytes(m.mp)
        os.unlink(m.mp / "a")
        deadline = time.monotonic() + 20  # the kernel forgets the inode soon after: then it is freed
        while _free_bytes(m.mp) < full + 20 * MiB and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _free_bytes(m.mp) >= full + 20 * MiB  # df counts it free ...
        (m.mp / "c").write_bytes(big * 20)  # ... and a write that needs it gets it
        assert (m.mp / "c").stat().st_size == 20 * MiB


def _used_bytes(mp: Path) -> int:
    st = os.statvfs(mp)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def _pages(n: int) -> int:
    return -(-n // PAGE) * PAGE


ISSUE_SIZES = {"64k": 64 * 1024, "300000": 300_000, "20k": 20_000, "1": 1, "4097": 4097, "3m": 3 * MiB + 5}


def test_closed_files_take_their_size_and_df_agrees(tmp_path: Path) -> None:
    """Preallocation past the end is given back at the last close: st_blocks is the size in
    whole pages and statfs's used space grows by the sum, not twice it (issue 12, item 7)."""
    with traxfs_mount(tmp_path, size=128 * MiB) as m:
        d = m.mp / "d"
        d.mkdir()
        os.sync()
        used0 = _used_bytes(m.mp)
        total = 0
        for name, size in ISSUE_SIZES.items():
            data = os.urandom(size)
            with open(d / name, "wb") as f:  # as cp writes: in pieces, appending
                for off in range(0, size, 65536):
                    f.write(data[off : off + 65536])
            total += _pages(size)
        for i in range(200):  # many small files
            (d / f"small{i}").write_bytes(b"s" * (100 + 37 * i))
            total += _pages(100 + 37 * i)
        for name, size in ISSUE_SIZES.items():
            st = os.stat(d / name)
            assert st.st_blocks * 512 == _pages(size), (name, size, st.st_blocks)
        for i in range(200):
            assert os.stat(d / f"small{i}").st_blocks * 512 == _pages(100 + 37 * i), i
        grown = _used_bytes(m.mp) - used0
        assert total <= grown <= total + 2 * MiB, (total, grown)  # data plus a little metadata
        listed = sum(os.stat(d / n).st_blocks * 512 for n in os.listdir(d))
        assert listed == total  # du agrees with df


def test_a_stat_right_after_close_sees_the_preallocation_given_back(tmp_path: Path) -> None:
    """A writer that looked at its file while writing (``fstat``: the kernel caches what it
    saw, preallocated pages counted) and closed it: the next stat shows the blocks of the size,
    at once — the server tells the kernel its copy is stale when it gives the pages back."""
    with traxfs_mount(tmp_path, size=64 * MiB) as m:
        p = m.mp / "grown"
        fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for _ in range(300):
                os.write(fd, b"g" * 4096)
            held = os.fstat(fd).st_blocks * 512
        finally:
            os.close(fd)
        assert held > 300 * 4096  # preallocated past the end while open
        assert os.stat(p).st_blocks * 512 == 300 * 4096


def test_st_blocks_of_a_sparse_file_counts_what_it_holds(tmp_path: Path) -> None:
    """A 5 GiB sparse file with 4 KiB written shows 8 blocks, not 5 GiB (issue 12, item 8)."""
    with traxfs_mount(tmp_path, size=64 * MiB) as m:
        p = m.mp / "sparse"
        with open(p, "wb") as f:
            f.truncate(5 << 30)
            f.seek(3 << 30)
            f.write(b"d" * PAGE)
        st = os.stat(p)
        assert st.st_size == 5 << 30
        assert st.st_blocks == PAGE // 512, st.st_blocks
        with open(p, "r+b") as f:  # a second page elsewhere: 16 blocks
            f.seek(1 << 30)
            f.write(b"e")
        assert os.stat(p).st_blocks == 2 * PAGE // 512
        (m.mp / "dir").mkdir()
        assert os.stat(m.mp / "dir").st_blocks == 0  # directories hold no data pages


def test_preallocation_a_crash_leaves_is_a_note_and_the_next_mount_gives_it_back(tmp_path: Path) -> None:
    with traxfs_mount(tmp_path, size=64 * MiB) as m:
        f = open(m.mp / "open", "wb", buffering=0)  # noqa: SIM115 - still open when the server dies
        f.write(b"x" * 50_000)
        f.write(b"x" * 50_000)  # an append: this one preallocates past the end
        os.fsync(f.fileno())
        m.kill()
        try:
            f.close()
        except OSError:
            pass  # the server is gone
        r = m.fsck()
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert "preallocated past the size, left by a crash" in r.stdout, r.stdout
        m.start()  # recovery, then the leftover preallocation is given back
        assert os.stat(m.mp / "open").st_blocks * 512 == _pages(100_000)


def test_fsck_is_strict_about_extents_past_the_size_after_a_clean_stop(tmp_path: Path) -> None:
    """Preallocation is given back at close and unmount, so after a clean stop an extent past
    the size is an error (here made by hiding a file's preallocation from the give-back)."""
    image = tmp_path / "fs.img"
    with ImageFileDevice(str(image), 64 * MiB, create=True) as dev:
        FileSystem.mkfs(dev)
    dev = ImageFileDevice(str(image))
    fs = FileSystem.open(dev, where=str(image))
    ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).ino
    fs.write(ino, 0, b"y" * 10_000)
    fs.write(ino, 10_000, b"y" * 10_000)  # an append: this one preallocates past the end
    assert fs.data.allocated_pages(ino) > _pages(20_000) // PAGE
    fs.data.preallocated.discard(ino)  # the give-back never hears of it
    fs.close()
    dev.close()
    with ImageFileDevice(str(image)) as dev:
        rep = check_device(dev, repair=False, where=str(image))
        assert rep.exit_code == 4 and any(f"inode {ino}: extent at file page 0" in p and "past the size 20000" in p
                                          for p in rep.problems), rep.as_dict()
        assert check_device(dev, repair=True, where=str(image)).exit_code == 1
        assert check_device(dev, repair=False, where=str(image)).exit_code == 0

"""A slow device read or a log flush stalls only the request that needs it; a full volume
gives ENOSPC and recovers after deletes.

The liveness tests serve the filesystem from a thread of this process on a device whose reads
or flushes the test holds at a gate (an event, not a delay): while one request is stuck at the
gate, unrelated requests must complete. A stall shows up as a timeout, never as a timing
threshold.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyfuse3
import pytest
import trio
from fsmount import served_in_thread, traxfs_mount
from waiting import wait_for

from traxfs.ext import fuse_lowlevel
from traxfs.fs.filedata import FileData
from traxfs.fs.filesystem import ROOT_INO, FileSystem
from traxfs.volume.device import Device, ImageFileDevice

MiB = 1 << 20
pytestmark = pytest.mark.timeout(180)


class GatedDevice(Device):
    """An image device whose reads (``gate_reads``) or flushes (``gate_flushes``) wait at a
    gate while it is closed; ``stuck`` is set once a request is waiting there."""

    def __init__(self, inner: ImageFileDevice):
        self.inner, self.path, self.size, self.block_size = inner, inner.path, inner.size, inner.block_size
        self.gate = threading.Event()
        self.gate.set()
        self.stuck = threading.Event()
        self.gate_reads = self.gate_flushes = False

    def _wait(self) -> None:
        self.stuck.set()
        assert self.gate.wait(120), "gate never opened"

    def read(self, off: int, n: int) -> bytes:
        if self.gate_reads and not self.gate.is_set():
            self._wait()
        return self.inner.read(off, n)

    def write(self, off: int, data) -> None:
        self.inner.write(off, data)

    def flush(self) -> None:
        if self.gate_flushes and not self.gate.is_set():
            self._wait()
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def gated(tmp_path):
    """(device, mountpoint): the filesystem served from a thread of this process."""
    inner = ImageFileDevice(str(tmp_path / "slow.img"), 256 * MiB, create=True)
    FileSystem.mkfs(inner)
    dev = GatedDevice(inner)
    try:
        with served_in_thread(dev, "traxfs-gated-", "traxfs:gated") as mp:
            try:
                yield dev, mp
            finally:
                dev.gate.set()
    finally:
        inner.close()


def _unrelated_work(mp: Path) -> str:
    """Requests that need neither the gated read nor a flush."""
    os.stat(mp / "other")
    assert (mp / "other").read_bytes() == b"o" * 10000  # served from the kernel's page cache
    (mp / "new").write_bytes(b"n" * 5000)  # a write and a create: no flush needed
    os.mkdir(mp / "dir2")
    return ",".join(sorted(os.listdir(mp)))


def test_slow_device_read_stalls_only_its_request(gated):
    dev, mp = gated
    (mp / "cold").write_bytes(os.urandom(4 * MiB))
    (mp / "other").write_bytes(b"o" * 10000)
    (mp / "other").read_bytes()
    # drop the kernel's cached pages of `cold` so reading it must reach the device
    fd = os.open(mp / "cold", os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    dev.gate_reads = True
    dev.gate.clear()
    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(os.pread, fd, 1 << 20, 0)
        assert dev.stuck.wait(30), "the read never reached the device"
        assert not slow.done()
        listing = pool.submit(_unrelated_work, mp).result(timeout=30)  # must not wait for the gate
        assert "new" in listing and "dir2" in listing
        assert not slow.done()  # still held at the gate: the work above really ran beside it
        dev.gate.set()
        assert len(slow.result(timeout=30)) == 1 << 20
    os.close(fd)


def test_log_flush_stalls_only_the_fsync(gated):
    dev, mp = gated
    (mp / "other").write_bytes(b"o" * 10000)
    (mp / "other").read_bytes()
    dev.gate_flushes = True
    dev.gate.clear()

    def durable_write() -> None:
        fd = os.open(mp / "synced", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"s" * 8192)
        os.fsync(fd)
        os.close(fd)

    with ThreadPoolExecutor(2) as pool:
        syncing = pool.submit(durable_write)
        assert dev.stuck.wait(30), "fsync never flushed the device"
        listing = pool.submit(_unrelated_work, mp).result(timeout=30)
        assert "synced" in listing and "new" in listing
        assert not syncing.done()
        dev.gate.set()
        syncing.result(timeout=30)
    assert (mp / "synced").read_bytes() == b"s" * 8192


class HeldSeek:
    """The filesystem's seek (``FileData.seek``) held at a gate (``entered`` is set once a call waits there), then
    the real one."""

    def __init__(self, monkeypatch):
        self.entered, self.release, self.returned = threading.Event(), threading.Event(), threading.Event()
        real = FileData.seek

        def held(files, ino, off, whence):
            self.entered.set()
            try:
                assert self.release.wait(60), "the held seek was never released"
                return real(files, ino, off, whence)
            finally:
                self.returned.set()

        monkeypatch.setattr(FileData, "seek", held)


def _seek(path: Path, off: int, whence: int) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, off, whence)
    finally:
        os.close(fd)


def test_slow_lseek_stalls_only_itself(gated, monkeypatch):
    """pyfuse3 has no lseek; traxfs.ext.fuse_lowlevel answers it on the reader thread that read
    it: while one lseek is held there, another reader serves everything else (the kernel holds
    the inode's lock across SEEK_DATA / SEEK_HOLE, so the held call is the only thing that
    waits: other files, other requests go on)."""
    _, mp = gated
    (mp / "other").write_bytes(b"o" * 10000)
    (mp / "other").read_bytes()
    (mp / "f").write_bytes(b"f" * 8192)
    held = HeldSeek(monkeypatch)
    with ThreadPoolExecutor(2) as pool:
        seeking = pool.submit(_seek, mp / "f", 0, os.SEEK_HOLE)
        assert held.entered.wait(30), "the lseek never reached the filesystem"
        listing = pool.submit(_unrelated_work, mp).result(timeout=30)  # must not wait for the seek
        assert "new" in listing and "dir2" in listing
        assert not seeking.done()  # still held: the work above really ran beside it
        held.release.set()
        assert seeking.result(timeout=30) == 8192


def test_lseek_errors_answer_the_kernel_and_the_mount_lives_on(gated, monkeypatch, caplog):
    """A bug in the filesystem's seek, or a result the reply cannot carry, answers EIO with a
    log line (an unanswered request would hang the caller); an FsError answers its errno."""
    _, mp = gated
    (mp / "f").write_bytes(b"d" * 5000)
    real = FileData.seek

    def failing(files, ino, off, whence):
        raise RuntimeError("a bug in seek")

    for broken, logged in ((failing, RuntimeError), (lambda files, ino, off, whence: "not an offset", TypeError)):
        monkeypatch.setattr(FileData, "seek", broken)
        caplog.clear()
        with pytest.raises(OSError) as e:
            _seek(mp / "f", 0, os.SEEK_DATA)
        assert e.value.errno == errno.EIO
        assert any(r.getMessage().startswith("internal error in") and isinstance(r.exc_info[1], logged)
                   for r in caplog.records if r.exc_info), [r.getMessage() for r in caplog.records]
    monkeypatch.setattr(FileData, "seek", real)
    assert _seek(mp / "f", 100, os.SEEK_DATA) == 100
    with pytest.raises(OSError) as e:
        _seek(mp / "f", 5000, os.SEEK_DATA)
    assert e.value.errno == errno.ENXIO


def test_lseek_still_running_at_unmount_is_answered(gated, monkeypatch, caplog):
    """The session ends (as on SIGTERM) while a worker still runs an lseek: the request is
    answered before libfuse frees the session (which frees libfuse's copy of the request), and
    the worker's late answer is dropped instead of touching freed memory."""
    _, mp = gated
    (mp / "f").write_bytes(b"d" * 5000)
    monkeypatch.setattr(fuse_lowlevel, "DRAIN_TIMEOUT", 0.5)
    held = HeldSeek(monkeypatch)
    with ThreadPoolExecutor(1) as pool:
        seeking = pool.submit(_seek, mp / "f", 0, os.SEEK_DATA)
        assert held.entered.wait(30), "the lseek never reached the filesystem"
        trio.from_thread.run_sync(pyfuse3.terminate, trio_token=pyfuse3.trio_token)
        with pytest.raises(OSError) as e:
            seeking.result(timeout=30)
        # libfuse closes /dev/fuse as it unmounts, so the kernel itself ends the call in flight
        # (ECONNABORTED), unless the drain's EIO reached it first; ENOTCONN is what a later
        # request of a dead connection gets (a close's FLUSH, when the open was for writing)
        assert e.value.errno in (errno.ECONNABORTED, errno.EIO, errno.ENOTCONN)
    wait_for(lambda: any("still unanswered at unmount" in r.getMessage() for r in caplog.records),
              "the request left at unmount was not answered")
    held.release.set()  # the worker finishes; its answer must not reach the freed session
    assert held.returned.wait(30), "the held seek never returned"
    time.sleep(0.2)  # its (dropped) answer: a crash here would take the test process down


@pytest.mark.timeout(300)
def test_full_volume_gives_enospc_then_recovers_after_deletes(tmp_path):
    with traxfs_mount(tmp_path, size=64 * MiB) as m:
        chunk = os.urandom(MiB)
        written = 0
        with pytest.raises(OSError) as exc, open(m.mp / "fill", "wb") as f:
            while True:
                f.write(chunk)
                f.flush()
                written += len(chunk)
                assert written < 80 * MiB, "a 64 MiB volume accepted more than 80 MiB"
        assert exc.value.errno == errno.ENOSPC
        assert written > 8 * MiB
        # the filesystem still works: metadata, reads, and what was written is intact
        os.mkdir(m.mp / "still-ok")
        size = os.stat(m.mp / "fill").st_size
        with open(m.mp / "fill", "rb") as f:
            assert f.read(MiB) == chunk
        # many small files until full, too
        n = 0
        with pytest.raises(OSError) as exc2:
            while True:
                (m.mp / f"small{n}").write_bytes(b"x" * 8192)
                n += 1
        assert exc2.value.errno == errno.ENOSPC
        # delete; freed space is reused once the kernel has forgotten the inodes (it sends
        # FORGET asynchronously) and the frees are durable (an fsync forces them)
        os.unlink(m.mp / "fill")
        for i in range(n):
            os.unlink(m.mp / f"small{i}")
        want = chunk * (size // MiB // 2)
        for _attempt in range(100):
            try:
                (m.mp / "after").write_bytes(want)
                break
            except OSError as e:
                assert e.errno == errno.ENOSPC
                fd = os.open(m.mp / "still-ok", os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
                time.sleep(0.1)
        assert (m.mp / "after").read_bytes() == want


def test_ref_and_unref_never_wait_behind_a_destruction(tmp_path):
    """The FUSE readers count a reference for every lookup and readdir entry: counting must
    not wait for the metadata lock, which a thread destroying a large file holds across
    its page misses. Here the destruction waits at a gate (a device read) holding that lock,
    and references to another file are still counted."""
    inner = ImageFileDevice(str(tmp_path / "fs.img"), 256 * MiB, create=True)
    FileSystem.mkfs(inner)
    fs = FileSystem.open(inner)
    other = fs.create(ROOT_INO, b"other", 0o644, 0, 0).ino
    big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).ino
    for off in range(0, 64 * MiB, 4 * MiB):  # many extents, many checksum records
        fs.write(big, off + MiB, b"b" * 4096)
    fs.close()
    dev = GatedDevice(inner)
    fs = FileSystem.open(dev)  # a cold buffer: the destruction below must read pages
    try:
        fs.ref(big)  # open in the kernel: unlinking leaves it to the last unref
        fs.unlink(ROOT_INO, b"big")
        dev.gate_reads = True
        dev.gate.clear()

        def last_unref() -> None:
            assert fs.unref(big), "the last reference of an unlinked file asks for its destruction"
            fs.collect(big)

        counted = threading.Event()

        def count() -> None:
            for _ in range(100):
                fs.ref(other)
                assert not fs.unref(other)
            counted.set()

        with ThreadPoolExecutor(1) as pool:
            destroying = pool.submit(last_unref)
            try:
                assert dev.stuck.wait(30), "the destruction never read the device"
                # the destruction holds the metadata lock at the gate
                assert not fs.inodes.lock.acquire(blocking=False)
                threading.Thread(target=count, daemon=True).start()
                assert counted.wait(30), "ref/unref waited for the metadata lock"
                assert not destroying.done()  # still at the gate: the counting really ran beside it
            finally:
                dev.gate.set()
            destroying.result(timeout=60)
        assert not fs.inodes.exists(big)
    finally:
        dev.gate.set()
        fs.close()
        inner.close()

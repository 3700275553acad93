"""The hot FUSE requests served by ``traxfs.ext.fuse_lowlevel`` instead of pyfuse3 (issue 17):
lookup, getattr, forget, create, write, flush, release, fsync, getxattr and unlink each take the
route, answer with what the filesystem said (errnos, a bug as EIO with a log line, getxattr's
buffer sizes), and keep the kernel's reference counts exact, so unlinked files are freed.

The filesystem is served from a thread of this process (as ``trax mount`` serves it), so a
test can break a filesystem call on purpose."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import stat
import time
from pathlib import Path

import pytest
from fsmount import served_image
from waiting import wait_for

from traxfs.fs.filedata import FileHandle
from traxfs.fs.filesystem import FileSystem
from traxfs.fs.fuse.mount import NEEDED

MiB = 1 << 20
pytestmark = pytest.mark.timeout(180)
_libc = ctypes.CDLL(None, use_errno=True)


@pytest.fixture
def served(tmp_path):
    """The mountpoint of a filesystem served from a thread of this process."""
    with served_image(tmp_path / "fast.img", "traxfs-fast-", "traxfs:fast") as mp:
        yield mp


def _status(mp: Path) -> dict:
    return json.loads((mp / ".trax" / "filesystem.json").read_text())


def _drop_kernel_caches() -> None:
    """Dentries and inodes out of the kernel's caches: it forgets what it held (FORGET)."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def _settled_references(mp: Path) -> int:
    """The inodes the kernel still references once the FORGETs of a cache drop have all arrived:
    the kernel sends them after ``drop_caches`` returns, so a count read at once can still fall."""
    def counts() -> tuple[int, int]:  # the references held, and the FORGETs answered so far
        st = _status(mp)
        return st["referenced_inodes"], st["fuse_lowlevel"]["forget"]

    _drop_kernel_caches()
    last, steady_since = counts(), time.monotonic()
    deadline = steady_since + 60
    while time.monotonic() - steady_since < 1.0:
        assert time.monotonic() < deadline, "the referenced inodes never settled"
        time.sleep(0.05)
        now = counts()
        if now != last:
            last, steady_since = now, time.monotonic()
    return last[0]


def test_hot_requests_take_the_fast_route(served):
    before = _status(served)["fuse_lowlevel"]
    assert before["installed"] == sorted(NEEDED)
    d = served / "d"
    d.mkdir()
    for i in range(20):
        with open(d / f"f{i}", "wb") as f:
            f.write(b"x" * 1000)
            os.fsync(f.fileno())
    for i in range(20):
        assert os.stat(d / f"f{i}").st_size == 1000
    _drop_kernel_caches()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")  # the pages too: the reads below reach the filesystem
    for i in range(20):
        assert os.stat(d / f"f{i}").st_size == 1000  # looked up again
        assert (d / f"f{i}").read_bytes() == b"x" * 1000
        os.rename(d / f"f{i}", d / f"g{i}")
        os.chmod(d / f"g{i}", 0o600)
        os.utime(d / f"g{i}", ns=(i, 7 * i))  # explicit times
        st = os.stat(d / f"g{i}")
        assert (st.st_mode & 0o777, st.st_atime_ns, st.st_mtime_ns) == (0o600, i, 7 * i)
        os.utime(d / f"g{i}")  # now
        assert os.stat(d / f"g{i}").st_mtime_ns > time.time_ns() - 60 * 10**9
        os.unlink(d / f"g{i}")
        os.mkdir(d / f"sub{i}")
        assert os.listdir(d / f"sub{i}") == []
        os.rmdir(d / f"sub{i}")
    for i in range(20):
        os.symlink(f"g{i}", d / f"l{i}")
        assert os.readlink(d / f"l{i}") == f"g{i}"
        os.mknod(d / f"p{i}", 0o600 | stat.S_IFIFO)
        os.link(d / f"p{i}", d / f"q{i}")
        assert os.lstat(d / f"q{i}").st_nlink == 2
        assert os.listxattr(d / f"p{i}") == []
        assert os.statvfs(d).f_namemax == 255
        for name in (f"l{i}", f"p{i}", f"q{i}"):
            os.unlink(d / name)
    _drop_kernel_caches()
    after = _status(served)["fuse_lowlevel"]
    for op in ("create", "open", "read", "write", "flush", "release", "fsync", "lookup", "unlink", "forget",
               "getxattr", "mkdir", "rmdir", "rename", "setattr", "opendir", "releasedir", "readdirplus",
               "symlink", "readlink", "mknod", "link", "listxattr", "statfs"):
        assert after[op] >= before[op] + 20, (op, before[op], after[op])
    assert after["getattr"] >= before["getattr"]
    assert os.listdir(d) == []


def test_closing_a_file_only_read_sends_no_flush(served):
    """An open without write access answers with FOPEN_NOFLUSH: its close(2) costs no round
    trip. Opens for writing keep their FLUSH (its work: a writer's preallocation given back
    before close returns). When a reader holds the last handle of a file a writer grew, the
    preallocation goes at the reader's release instead."""
    f = served / "grown"
    fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o644)
    reader = None
    try:
        for i in range(64):  # appends: pages preallocated past the end
            os.pwrite(fd, b"a" * 4096, i * 4096)
        reader = os.open(f, os.O_RDONLY)
        os.close(fd)  # not the last handle: the preallocation stays for now
        fd = None
        assert os.stat(f).st_blocks * 512 > 64 * 4096
        before = _status(served)["fuse_lowlevel"]
        for _ in range(50):
            with open(f, "rb") as r:
                assert len(r.read()) == 64 * 4096
        after = _status(served)["fuse_lowlevel"]
        assert after["open"] - before["open"] >= 50
        assert after["flush"] == before["flush"], (before, after)
    finally:
        for left in (fd, reader):
            if left is not None:
                os.close(left)  # the reader's is the last handle: its release gives the preallocation back
    wait_for(lambda: os.stat(f).st_blocks * 512 == 64 * 4096, "the preallocation was never given back")
    for _ in range(10):
        with open(f, "r+b") as w:
            w.read(1)
    assert _status(served)["fuse_lowlevel"]["flush"] == after["flush"] + 10


def test_writes_ask_no_capabilities_once_a_file_has_none(served):
    """HANDLE_KILLPRIV_V2 (our INIT answer carries it): the kernel asks ``security.capability``
    at the first write of a file and none of the next 200; a file given one is asked again, and
    the write drops it (even root's, as on a local filesystem)."""
    assert _status(served)["fuse_lowlevel"]["killpriv_v2"] is True
    f = served / "many"
    before = _status(served)["fuse_lowlevel"]
    fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for i in range(200):
            os.pwrite(fd, b"w" * 4096, i * 4096)
    finally:
        os.close(fd)
    after = _status(served)["fuse_lowlevel"]
    assert after["write"] - before["write"] == 200
    assert after["getxattr"] - before["getxattr"] <= 1, (before, after)
    os.setxattr(f, "security.capability", bytes.fromhex("01000002" + "00" * 16))
    fd = os.open(f, os.O_WRONLY)
    try:
        os.pwrite(fd, b"x", 0)
    finally:
        os.close(fd)
    assert _status(served)["fuse_lowlevel"]["getxattr"] > after["getxattr"]
    with pytest.raises(OSError) as gone:
        os.getxattr(f, "security.capability")
    assert gone.value.errno == errno.ENODATA


def test_references_return_and_unlinked_files_are_freed(served):
    """Every lookup and create reply takes a reference the kernel gives back with FORGET: once
    the kernel drops its caches the filesystem holds none of the files, and the unlinked ones
    are destroyed (their space back)."""
    d = served / "refs"
    d.mkdir()
    base = _settled_references(served)
    free_before = os.statvfs(served).f_bfree
    for i in range(100):
        (d / f"f{i}").write_bytes(os.urandom(64 * 1024))
    for i in range(100):
        os.stat(d / f"f{i}")
    with open(d / "f0", "rb") as held:  # open while unlinked: kept until closed
        for i in range(100):
            os.unlink(d / f"f{i}")
        _drop_kernel_caches()
        # the open file's dentry pins it and its directory
        wait_for(lambda: _status(served)["referenced_inodes"] == base + 2,
                  lambda: f"references were not given back: {_status(served)['referenced_inodes']} held, {base} + 2 expected")
        assert held.read(10) and len(held.read()) == 64 * 1024 - 10
    _drop_kernel_caches()
    wait_for(lambda: _status(served)["referenced_inodes"] == base, "the last reference stayed")
    wait_for(lambda: os.statvfs(served).f_bfree >= free_before - 16, "the unlinked files' space was not freed")


def test_listings_of_many_buffers_give_each_entry_once_and_its_reference_back(served):
    """READDIRPLUS on the readers: 4,000 entries of names up to 250 bytes (some 1.7 MB of
    answer) take several answers, each the entries that fit in the kernel's buffer and no more;
    each name comes once with its attributes, and every reference the kernel took with an entry
    is given back once it drops its caches."""
    d = served / "many"
    d.mkdir()
    names = {f"{i:05d}-" + "n" * (i % 245) for i in range(4000)}
    for name in names:
        (d / name).write_bytes(b"")
    os.chmod(d / "00007-nnnnnnn", 0o640)
    base = _settled_references(served)
    before = _status(served)["fuse_lowlevel"]["readdirplus"]
    with os.scandir(d) as it:
        got = {e.name: e.stat(follow_symlinks=False) for e in it}  # attributes from the listing
    assert set(got) == names and len(got) == 4000
    assert got["00007-nnnnnnn"].st_mode & 0o777 == 0o640
    assert _status(served)["fuse_lowlevel"]["readdirplus"] - before >= 3  # two full answers at least, then the end
    assert _status(served)["referenced_inodes"] == base + 1 + 4000  # the directory, and each entry
    _drop_kernel_caches()
    wait_for(lambda: _status(served)["referenced_inodes"] == base,
              lambda: f"listing references not given back: {_status(served)['referenced_inodes']} held, {base} expected")


def _getxattr(path: Path, name: bytes, size: int) -> tuple[int, bytes]:
    buf = ctypes.create_string_buffer(max(size, 1))
    n = _libc.getxattr(str(path).encode(), name, buf if size else None, ctypes.c_size_t(size))
    if n < 0:
        return -ctypes.get_errno(), b""
    return n, buf.raw[:n] if size else b""


def test_getxattr_buffer_sizes(served):
    p = served / "x"
    p.write_bytes(b"")
    os.setxattr(p, "user.k", b"twelve bytes")
    assert _getxattr(p, b"user.k", 0) == (12, b"")  # the size only
    assert _getxattr(p, b"user.k", 5) == (-errno.ERANGE, b"")
    assert _getxattr(p, b"user.k", 12) == (12, b"twelve bytes")
    assert _getxattr(p, b"user.none", 64) == (-errno.ENODATA, b"")
    assert _getxattr(p, b"security.capability", 64) == (-errno.ENODATA, b"")  # cached, then asked again
    assert _getxattr(p, b"security.capability", 64) == (-errno.ENODATA, b"")


def test_errors_answer_their_errno_and_bugs_eio(served, monkeypatch, caplog):
    """A fast handler's call that raises an FsError answers its errno; a bug answers EIO with
    a log line; the mount goes on either way (an unanswered request would hang the caller)."""
    from traxfs.fs.errors import FsError

    (served / "f").write_bytes(b"a")
    real_create, real_write = FileSystem.create_file, FileHandle.write

    def full(*a, **k):
        raise FsError(errno.ENOSPC, "full")

    def bug(*a, **k):
        raise RuntimeError("a bug")

    for broken, want in ((full, errno.ENOSPC), (bug, errno.EIO)):
        monkeypatch.setattr(FileSystem, "create_file", broken)
        with pytest.raises(OSError) as e:
            open(served / f"new-{want}", "wb").close()
        assert e.value.errno == want
        monkeypatch.setattr(FileSystem, "create_file", real_create)
        monkeypatch.setattr(FileHandle, "write", broken)
        with open(served / "f", "r+b", buffering=0) as f:
            with pytest.raises(OSError) as e:
                f.write(b"b")
            assert e.value.errno == want
        monkeypatch.setattr(FileHandle, "write", real_write)
    assert any(r.getMessage().startswith("internal error in") for r in caplog.records)
    monkeypatch.setattr(FileSystem, "lookup", bug)
    with pytest.raises(OSError) as e:
        os.stat(served / "not-cached")
    assert e.value.errno == errno.EIO
    monkeypatch.undo()
    with open(served / "g", "wb") as f:
        f.write(b"fine")
    assert (served / "g").read_bytes() == b"fine" and (served / "f").read_bytes() == b"a"
    assert not (served / f"new-{errno.ENOSPC}").exists()

"""``chattr``/``lsattr`` through the real mount (issue 19): FS_IOC_GETFLAGS/SETFLAGS reach the
server as FUSE_IOCTL (``traxfs.ext.fuse_lowlevel`` adds the handler pyfuse3 lacks); immutable
and append-only are enforced by the server (the kernel's FUSE module leaves that to it), nodump
and noatime are stored. Each refusal is EPERM and changes nothing.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import struct
import subprocess
import time

import pytest

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def d(fs_mount, mnt):
    if os.geteuid() != 0:
        pytest.skip("chattr +i / +a need CAP_LINUX_IMMUTABLE")
    return mnt


def _chattr(*args) -> None:
    r = subprocess.run(["chattr", *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _lsattr(path) -> str:
    r = subprocess.run(["lsattr", "-d", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()[0]


def _eperm(fn) -> None:
    with pytest.raises(OSError) as e:
        fn()
    assert e.value.errno == errno.EPERM, e.value


def test_immutable_file_refuses_every_change(d):
    f = d / "f"
    f.write_bytes(b"frozen\n")
    assert _lsattr(f) == "-" * len(_lsattr(f))
    early = os.open(f, os.O_WRONLY)  # opened before chattr: its writes are refused too
    try:
        _chattr("+i", f)
        assert "i" in _lsattr(f)
        r = subprocess.run(["sh", "-c", f"echo more >> {f}"], capture_output=True, text=True)
        assert r.returncode != 0 and "Operation not permitted" in r.stderr  # a refused write, by a shell
        _eperm(lambda: os.pwrite(early, b"x", 0))
        _eperm(lambda: os.open(f, os.O_WRONLY))
        _eperm(lambda: os.truncate(f, 0))
        _eperm(lambda: os.chmod(f, 0o600))
        _eperm(lambda: os.utime(f, (1, 1)))
        _eperm(lambda: os.setxattr(f, "user.x", b"1"))
        _eperm(lambda: os.unlink(f))
        _eperm(lambda: os.rename(f, d / "g"))
        _eperm(lambda: os.link(f, d / "h"))
        assert f.read_bytes() == b"frozen\n" and sorted(os.listdir(d)) == ["f"]
        _chattr("-i", f)
        os.pwrite(early, b"F", 0)
    finally:
        os.close(early)
    assert f.read_bytes() == b"Frozen\n"
    os.unlink(f)


def test_append_only_file_takes_appends_only(d):
    f = d / "log"
    f.write_bytes(b"one\n")
    _chattr("+a", f)
    assert "a" in _lsattr(f)
    with open(f, "ab") as w:
        w.write(b"two\n")
    _eperm(lambda: open(f, "r+b"))
    _eperm(lambda: open(f, "wb"))
    _eperm(lambda: os.truncate(f, 0))
    _eperm(lambda: os.unlink(f))
    assert f.read_bytes() == b"one\ntwo\n"
    _chattr("-a", f)
    os.unlink(f)


def test_immutable_and_append_only_directories(d):
    imm, app = d / "imm", d / "app"
    imm.mkdir()
    app.mkdir()
    (imm / "x").write_bytes(b"")
    (app / "x").write_bytes(b"")
    _chattr("+i", imm)
    _chattr("+a", app)
    _eperm(lambda: (imm / "new").write_bytes(b""))
    _eperm(lambda: os.mkdir(imm / "sub"))
    _eperm(lambda: os.unlink(imm / "x"))
    _eperm(lambda: os.rename(app / "x", imm / "y"))
    (app / "new").write_bytes(b"")  # append-only directory: entries may be added ...
    _eperm(lambda: os.unlink(app / "x"))  # ... not removed
    _eperm(lambda: os.rename(app / "x", app / "z"))
    assert sorted(os.listdir(imm)) == ["x"] and sorted(os.listdir(app)) == ["new", "x"]
    _chattr("-i", imm)
    _chattr("-a", app)
    os.unlink(imm / "x")
    os.unlink(app / "x")


def test_nodump_and_noatime_are_kept_and_unknown_flags_refused(fs_mount, d):
    f = d / "kept"
    f.write_bytes(b"k")
    _chattr("+d", "+A", f)
    assert {"d", "A"} <= set(_lsattr(f))
    assert "trax.flags" not in os.listxattr(f)  # stored out of sight
    r = subprocess.run(["chattr", "+c", str(f)], capture_output=True, text=True)  # compression: not kept
    assert r.returncode != 0 and "Operation not supported" in r.stderr, r.stderr
    assert {"d", "A"} <= set(_lsattr(f))
    fs_mount.stop()  # flags are on disk: they survive a remount, and fsck takes them as they are
    r = fs_mount.fsck()
    assert r.returncode == 0, r.stdout + r.stderr
    fs_mount.start()
    assert {"d", "A"} <= set(_lsattr(f))
    _chattr("-d", "-A", f)
    assert _lsattr(f) == "-" * len(_lsattr(f))


def test_a_chattr_shows_its_ctime_to_the_next_stat(d):
    """The kernel re-reads no attributes after an ioctl: the server tells it that its cached
    ones are stale, so the ctime a ``chattr`` sets is what the very next stat sees, not what it
    was until the attribute timeout (1 s) ran out. The ioctl is made in-process (a ``chattr``
    process could take longer than the timeout on a slow machine, and the test could not fail)."""
    f = d / "ctime"
    f.write_bytes(b"c")
    fd = os.open(f, os.O_RDONLY)
    try:
        flags = struct.unpack("i", fcntl.ioctl(fd, 0x80086601, b"\0" * 4))[0]  # FS_IOC_GETFLAGS
        before = os.fstat(fd).st_ctime_ns  # the kernel holds these attributes for a second now
        time.sleep(0.01)
        fcntl.ioctl(fd, 0x40086602, struct.pack("i", flags | 0x80))  # FS_IOC_SETFLAGS: +A (noatime)
        after = os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)
    assert "A" in _lsattr(f)
    assert after > before, (before, after)


def test_other_ioctls_are_answered_without_a_worker(fs_mount, mnt):
    # every buffered open() asks isatty (TCGETS): answered ENOTTY in the C handler, never
    # counted as a request of the Python one
    if fs_mount is None:
        pytest.skip("traxfs only")
    def served() -> int:
        return json.loads((fs_mount.mp / ".trax" / "filesystem.json").read_text())["fuse_lowlevel"]["ioctl"]

    (mnt / "t").write_bytes(b"t")
    before = served()
    for _ in range(5):
        with open(mnt / "t", "rb") as f:
            assert not f.isatty()
    assert served() == before

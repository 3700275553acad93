"""What issue 19 asks for that this stack cannot carry, refused with the standard errno (and
said in trax-mount(8)); these tests notice the day the route opens (a newer libfuse or pyfuse3).

* ``O_TMPFILE``: the kernel (6.1+) sends FUSE_TMPFILE, which libfuse 3.14 has no operation for
  (its low-level ``tmpfile`` came with libfuse 3.17): it answers ENOSYS and the kernel then
  refuses every ``O_TMPFILE`` open with EOPNOTSUPP. Programs fall back to a named temporary
  file and ``rename`` (Python's ``tempfile`` does).
* birth time: the kernel asks for it only with FUSE_STATX (protocol 7.39); libfuse 3.14 speaks
  7.38, so ``statx`` reports no ``STATX_BTIME`` (``stat -c %W`` prints 0) although traxfs keeps
  each inode's creation time.
* ``chattr``/``lsattr``: FS_IOC_GETFLAGS/SETFLAGS reach a FUSE server as FUSE_IOCTL; pyfuse3
  has no ioctl handler and traxfs does not yet add one (``traxfs.ext.fuse_lowlevel`` could fill
  the slot as it does for fallocate; the flags would need a place in the inode record and checks
  in every changing call): EOPNOTSUPP.
"""

from __future__ import annotations

import errno
import os
import subprocess
import tempfile

import pytest

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def traxfs_dir(fs_mount, mnt):
    if fs_mount is None:
        pytest.skip("traxfs only: the host filesystem has these")
    return mnt


def test_o_tmpfile_is_refused_with_eopnotsupp(traxfs_dir):
    with pytest.raises(OSError) as e:
        os.open(traxfs_dir, os.O_TMPFILE | os.O_RDWR, 0o600)
    assert e.value.errno == errno.EOPNOTSUPP
    assert os.listdir(traxfs_dir) == []
    with tempfile.TemporaryFile(dir=traxfs_dir) as f:  # Python's fallback: a named file, unlinked
        f.write(b"x")
    assert os.listdir(traxfs_dir) == []


def test_no_birth_time_reaches_statx(traxfs_dir):
    (traxfs_dir / "f").write_bytes(b"x")
    r = subprocess.run(["stat", "-c", "%W", str(traxfs_dir / "f")], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "0"


def test_chattr_and_lsattr_are_refused(traxfs_dir):
    (traxfs_dir / "f").write_bytes(b"x")
    for argv in (["lsattr", str(traxfs_dir / "f")], ["chattr", "+i", str(traxfs_dir / "f")]):
        r = subprocess.run(argv, capture_output=True, text=True)
        assert r.returncode != 0 and "Operation not supported" in r.stderr, r.stderr
    (traxfs_dir / "f").write_bytes(b"still writable")  # nothing was set

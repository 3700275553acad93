"""What issue 19 asks for that this stack cannot carry, refused with the standard errno (and
said in trax-mount(8)); these tests notice the day the route opens (a newer libfuse or pyfuse3).

* ``O_TMPFILE``: the kernel (6.1+) sends FUSE_TMPFILE, which libfuse 3.14 has no operation for
  (its low-level ``tmpfile`` came with libfuse 3.17): it answers ENOSYS and the kernel then
  refuses every ``O_TMPFILE`` open with EOPNOTSUPP. Programs fall back to a named temporary
  file and ``rename`` (Python's ``tempfile`` does).
* birth time: the kernel asks for it only with a FUSE_STATX request, which libfuse 3.14 has no
  operation for, so ``statx`` reports no ``STATX_BTIME`` (``stat -c %W`` prints 0) although traxfs keeps
  each inode's creation time.
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

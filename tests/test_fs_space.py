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

"""``/.snapshots``: where snapshots of the filesystem will appear (a later issue), one read-only
directory per snapshot. Until then an empty read-only directory; every change there is refused
with EOPNOTSUPP (``mkdir /.snapshots/NAME`` is not how a snapshot is taken)."""

from __future__ import annotations

import errno
import time

from ..errors import FsError
from ..keys import Inode
from .protocol import Caller, Subtree, read_only_dir


class Snapshots(Subtree):
    name = b".snapshots"
    tag = 2
    refuse_errno = errno.EOPNOTSUPP

    def __init__(self) -> None:
        self._made_ns = time.time_ns()

    def getattr(self, ino: int, caller: Caller) -> Inode:
        if ino != self.top_ino:
            raise FsError(errno.ENOENT, f"inode {ino} does not exist")
        return read_only_dir(ino, self._made_ns)

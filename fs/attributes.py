"""Changing an inode's attributes (chmod, chown, utimes, truncate through setattr)."""

from __future__ import annotations

import stat

from .filedata import FileData
from .inodes import Inodes
from .keys import Inode
from .limits import now_ns

UNCHANGED_ID = 0xFFFFFFFF  # chown's "leave this id as it is" ((uid_t) -1)


class Attributes:
    def __init__(self, inodes: Inodes, files: FileData) -> None:
        self.inodes = inodes
        self.files = files

    def setattr(self, ino: int, *, mode: int | None = None, uid: int | None = None, gid: int | None = None,
                size: int | None = None, atime_ns: int | None = None, mtime_ns: int | None = None,
                ctime_ns: int | None = None) -> Inode:
        """Set what is given (a size truncates or extends the file); ctime becomes now unless
        given, and only if something changed. One transaction (plus the truncate's)."""
        if size is not None:
            self.files.truncate(ino, size)
        inodes = self.inodes
        with inodes.lock:
            node = inodes.copy(ino)
            changed = False
            if mode is not None:
                node.mode = stat.S_IFMT(node.mode) | (mode & 0o7777)
                changed = True
            if uid is not None and uid != UNCHANGED_ID:
                node.uid, changed = uid, True
            if gid is not None and gid != UNCHANGED_ID:
                node.gid, changed = gid, True
            if atime_ns is not None:
                node.atime_ns, changed = atime_ns, True
            if mtime_ns is not None:
                node.mtime_ns, changed = mtime_ns, True
            if changed:
                node.ctime_ns = ctime_ns if ctime_ns is not None else now_ns()
            elif ctime_ns is not None:
                node.ctime_ns, changed = ctime_ns, True
            if changed:
                with inodes.transaction() as ftx:
                    inodes.put(ftx, node)
            return inodes.attrs(ino)

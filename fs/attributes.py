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
                ctime_ns: int | None = None, kill_suidgid: bool = False) -> Inode:
        """Set what is given (a size truncates or extends the file); ctime becomes now unless
        given, and only if something changed. One transaction (plus the truncate's).
        ``kill_suidgid`` (no ``mode`` given): clear the set-ID bits as :func:`killed` says."""
        if size is not None:
            self.files.truncate(ino, size)
        inodes = self.inodes
        with inodes.lock:
            node = inodes.copy(ino)
            changed = False
            if mode is not None:
                node.mode = stat.S_IFMT(node.mode) | (mode & 0o7777)
                changed = True
            elif kill_suidgid and killed(node.mode) != node.mode:
                node.mode, changed = killed(node.mode), True
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

    def kill_suidgid(self, ino: int) -> bool:
        """Clear the set-ID bits of ``ino`` as :func:`killed` says (a write or a truncating open
        by a caller without CAP_FSETID); whether anything changed. Nothing is written when the
        bits are clear: every such write asks this."""
        with self.inodes.lock:  # re-entrant: setattr takes it again
            mode = self.inodes.get(ino).mode
            if killed(mode) == mode:
                return False
            self.setattr(ino, kill_suidgid=True)
            return True


def killed(mode: int) -> int:
    """``mode`` after a write, truncate or chown by an unprivileged caller (Linux's rule, as
    ``should_remove_suid``): no set-user-ID bit, and no set-group-ID bit if group-executable
    (without group execute it marks mandatory locking, not a privilege). Not for a directory,
    whose set-group-ID bit is inherited by what is made in it."""
    if stat.S_ISDIR(mode):
        return mode
    mode &= ~stat.S_ISUID
    if mode & stat.S_IXGRP:
        mode &= ~stat.S_ISGID
    return mode

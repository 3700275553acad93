"""``chattr`` flags of the tree's inodes (FS_IOC_GETFLAGS / FS_IOC_SETFLAGS): immutable and
append-only enforced, nodump and noatime stored (traxfs never updates atime on reads anyway).

The kernel's FUSE module leaves these checks to the server (it keeps no ``S_IMMUTABLE`` in its
inodes), so the façade refuses with EPERM, as Linux does: an immutable inode cannot be written,
truncated, have its attributes or extended attributes changed, be linked, unlinked or renamed,
and nothing can be created in, removed from or renamed within an immutable directory; an
append-only file opens for writing only with ``O_APPEND``, takes writes only at its end, cannot
be truncated, and (as a directory) lets entries be added but not removed or renamed away.

Stored as the value of the internal attribute ``trax.flags`` (4 bytes, little-endian) in the
xattrs tree, so no inode record changes format; the name is outside the namespaces ``setxattr``
accepts and ``listxattr`` shows only those. Cached per inode in memory (a miss costs one tree
lookup), so the checks on the write path cost a dictionary lookup.
"""

from __future__ import annotations

import errno

from .errors import FsError
from .inodes import Inodes
from .keys import xattr_key
from .limits import now_ns

FS_IMMUTABLE_FL = 0x10
FS_APPEND_FL = 0x20
FS_NODUMP_FL = 0x40
FS_NOATIME_FL = 0x80
SUPPORTED = FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL | FS_NOATIME_FL
FROZEN = FS_IMMUTABLE_FL | FS_APPEND_FL  # what forbids removing, renaming, attribute changes
NAME = b"trax.flags"
XFLAGS = ((FS_IMMUTABLE_FL, 0x08), (FS_APPEND_FL, 0x10), (FS_NOATIME_FL, 0x40), (FS_NODUMP_FL, 0x80))  # FS_XFLAG_*
CACHE_LIMIT = 1 << 17


def flags_to_xflags(flags: int) -> int:
    """The ``struct fsxattr`` form (``FS_XFLAG_*``) of the flags."""
    return sum(x for f, x in XFLAGS if flags & f)


def xflags_to_flags(xflags: int) -> int:
    """The flags of an ``FS_XFLAG_*`` set; an xflag traxfs keeps no flag for makes ``set``
    refuse (it comes back as a bit outside :data:`SUPPORTED`)."""
    known = sum(x for _, x in XFLAGS)
    return sum(f for f, x in XFLAGS if xflags & x) | (1 << 31 if xflags & ~known else 0)


class InodeFlags:
    def __init__(self, inodes: Inodes) -> None:
        self.inodes = inodes
        self.t = inodes.t
        self._cache: dict[int, int] = {}

    def get(self, ino: int) -> int:
        flags = self._cache.get(ino)
        if flags is None:
            with self.inodes.lock:
                self.inodes.get(ino)  # ENOENT for a destroyed inode
                raw = self.t["xattrs"].get(xattr_key(ino, NAME, 0))
            flags = int.from_bytes(raw, "little") if raw else 0
            if len(self._cache) > CACHE_LIMIT:
                self._cache.clear()
            self._cache[ino] = flags
        return flags

    def made(self, ino: int) -> None:
        """``ino`` was just made: it has no flags."""
        if len(self._cache) > CACHE_LIMIT:
            self._cache.clear()
        self._cache[ino] = 0

    def set(self, ino: int, flags: int) -> None:
        """Set the flags (the kernel checked CAP_LINUX_IMMUTABLE for immutable and append-only);
        EOPNOTSUPP for a flag traxfs does not keep, changing nothing."""
        if flags & ~SUPPORTED:
            raise FsError(errno.EOPNOTSUPP, f"inode flags {flags & ~SUPPORTED:#x} are not supported "
                                            "(traxfs keeps i, a, d, A)")
        key = xattr_key(ino, NAME, 0)
        with self.inodes.lock:
            node = self.inodes.copy(ino)
            with self.inodes.transaction() as ftx:
                if flags:
                    self.t["xattrs"].put(ftx.tx, key, flags.to_bytes(4, "little"))
                elif self.t["xattrs"].get(key) is not None:
                    self.t["xattrs"].delete(ftx.tx, key)
                node.ctime_ns = now_ns()
                self.inodes.put(ftx, node)
            self._cache[ino] = flags

    def refuse(self, ino: int, what: str, mask: int = FROZEN) -> None:
        """EPERM if ``ino`` has any flag of ``mask``."""
        flags = self.get(ino)
        if flags & mask:
            kind = "immutable" if flags & FS_IMMUTABLE_FL else "append-only"
            raise FsError(errno.EPERM, f"inode {ino} is {kind}: {what} refused")

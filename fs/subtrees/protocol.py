"""Subtrees: parts of the namespace served by something other than the POSIX tree.

A subtree owns one name in the root directory (``/.trax``, ``/.snapshots``; later ``/queues``,
``/tables``) and every inode below it. ``FileSystem`` routes every operation on an inode a
subtree owns to it, so the subtree decides what its files are and how they behave; the FUSE
adapter stays a translator that never knows subtrees exist. To add one: subclass
:class:`Subtree`, override what it supports (the rest is refused), and register an instance
with ``FileSystem.add_subtree`` before the filesystem is served.

**Inode numbers** are ``tag << TAG_SHIFT | local`` (:func:`subtree_ino`): the subtree's
:attr:`Subtree.tag` in the high bits, a number of the subtree's choosing below. The tree's own
inode numbers stay below ``1 << TAG_SHIFT``, so the two never meet, and both must be stable
across remounts (a tag is a constant of its subtree; local numbers come from what the subtree
stores, never from a counter of this process). The subtree's top directory is local number
:data:`TOP`. The top directory's readdir cookie in the root is ``DOTS + tag`` (cookies 1 and 2
are ``.`` and ``..``), so tags are 1 to ``FIRST_COOKIE - DOTS - 1`` (the tree's own cookies start
at ``keys.FIRST_COOKIE``).

**What the façade does for every subtree**: the root's entry (lookup, readdir; creating,
removing or renaming that name in the root is refused), ``.`` and the top directory's ``..``
(the root), ``.`` and ``..`` in every listing (a subtree's own cookies are shifted up by 2 for
them: a subtree never sees cookies 1 and 2), EXDEV for a rename or link between a subtree and anything else. Everything else
comes here, with the :class:`Caller` of the request (readlink and the xattr calls come without
one: the kernel's permission check covers them).

**Calls come on the FUSE reader threads**, several at once: guard your state with your own
locks. Raise :class:`~traxfs.fs.errors.FsError` with the errno the caller should see.

**Attributes** are :class:`~traxfs.fs.keys.Inode` values (``blocks`` in 512-byte units). A
file whose contents change by themselves must report the size a read will return and say so with
:meth:`Subtree.volatile` (the kernel then caches none of its attributes); its handles then
usually choose ``direct_io``.

**Reference counts**: the kernel's lookups of a subtree inode are counted through
:meth:`Subtree.ref` / :meth:`Subtree.unref` (count only: they must not wait); a subtree whose
inodes can go away keeps them until the last reference drops (``unref`` returning True asks for
:meth:`Subtree.collect`, on the reader thread that read the forget).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import NoReturn

from ..errors import FsError
from ..keys import DOTS, FIRST_COOKIE, Inode

TAG_SHIFT = 48
LOCAL_MASK = (1 << TAG_SHIFT) - 1
TOP = 1  # local number of a subtree's top directory


def subtree_ino(tag: int, local: int) -> int:
    """The inode number of a subtree's inode ``local``."""
    return tag << TAG_SHIFT | local


def tag_of(ino: int) -> int:
    """The tag of the subtree owning ``ino``; 0 for the tree's own inodes."""
    return ino >> TAG_SHIFT


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the calling thread (the kernel's ``pid``), its uid and gid."""

    pid: int = 0
    uid: int = 0
    gid: int = 0


def read_only_dir(ino: int, time_ns: int) -> Inode:
    """Attributes of a directory nobody may change (mode 0555, owned by root)."""
    return Inode(ino, stat.S_IFDIR | 0o555, 0, 0, 2, atime_ns=time_ns, mtime_ns=time_ns, ctime_ns=time_ns,
                 crtime_ns=time_ns)


def dense_seek(off: int, whence: int, size: int) -> int:
    """``SEEK_DATA`` / ``SEEK_HOLE`` in a file of ``size`` bytes without holes."""
    if off < 0 or off >= size:
        raise FsError(errno.ENXIO, f"offset {off} is outside the file (size {size})")
    return off if whence == os.SEEK_DATA else size


class OpenFile:
    """An open file: what ``FileSystem.open_file`` returns, and what reads, writes, seeks, fsyncs
    and the release of that open go to. The class attributes are the kernel cache choice for
    this open: ``direct_io`` (no page cache: every read and write comes here, sizes may change
    between reads), ``keep_cache`` (the cached pages stay valid across opens: only when nothing
    but this mount changes the file) and ``nonseekable`` (a stream: offsets mean nothing)."""

    direct_io = False
    keep_cache = False
    nonseekable = False

    def read(self, off: int, size: int) -> bytes:
        raise FsError(errno.EBADF, "not open for reading")

    def write(self, off: int, data: bytes) -> int:
        raise FsError(errno.EBADF, "not open for writing")

    def seek(self, off: int, whence: int) -> int:
        """``SEEK_DATA`` / ``SEEK_HOLE`` (only these come here); see :func:`dense_seek`."""
        raise FsError(errno.EINVAL, "SEEK_DATA and SEEK_HOLE are not supported for this file")

    def fallocate(self, mode: int, off: int, length: int) -> None:
        """fallocate(2) (``mode``: ``FALLOC_FL_*``): none here."""
        raise FsError(errno.EOPNOTSUPP, "fallocate is not supported for this file")

    def flush_pending(self) -> bool:
        """Cheap (no lock, no I/O): has :meth:`flush` anything to do at close(2)?"""
        return False

    def flush(self) -> None:
        """close(2) of a descriptor of this open (it may be one of several: ``dup``, ``fork``)."""

    def fsync(self, datasync: bool) -> None:
        """Make what was written through this open durable."""

    def release(self) -> None:
        """The last descriptor of this open is gone."""


class BytesFile(OpenFile):
    """An open file of fixed bytes (a document or schema as it was at the open): each open
    reads its own copy, so ``direct_io`` — the kernel must not serve another open's bytes."""

    direct_io = True

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, off: int, size: int) -> bytes:
        return self.data[off : off + size]

    def seek(self, off: int, whence: int) -> int:
        return dense_seek(off, whence, len(self.data))


class Subtree:
    """A part of the namespace below one root entry (see the module's text). Every method here
    has a default: lookups find nothing, changes are refused with :attr:`refuse_errno`."""

    name: bytes  # its entry in the root directory
    tag: int  # the high bits of its inode numbers; its root entry's readdir cookie is DOTS + tag
    refuse_errno = errno.EPERM  # what refused changes raise

    @property
    def top_ino(self) -> int:
        return subtree_ino(self.tag, TOP)

    def _refuse(self, what: str) -> NoReturn:
        raise FsError(self.refuse_errno, f"{self.name.decode(errors='replace')}: {what} is not supported here")

    # ----- reading the namespace ----------------------------------------------------------------
    def getattr(self, ino: int, caller: Caller) -> Inode:
        raise FsError(errno.ENOENT, f"inode {ino} does not exist")

    def volatile(self, ino: int) -> bool:
        """Do ``ino``'s attributes change without a request of this mount (no kernel caching)?"""
        return False

    def lookup(self, parent: int, name: bytes, caller: Caller) -> Inode:
        """``name`` in directory ``parent`` (``..`` of a directory below the top too)."""
        raise FsError(errno.ENOENT, f"{name!r} not found")

    def readdir(self, ino: int, after: int, limit: int, caller: Caller) -> list[tuple[bytes, Inode, int]]:
        """Up to ``limit`` entries of directory ``ino`` whose cookie is above ``after``, as
        (name, attributes, cookie), in cookie order; cookies are above 0, and an entry keeps its
        cookie as long as it exists (a listing resumes from the last cookie it got)."""
        return []

    def readlink(self, ino: int) -> bytes:
        raise FsError(errno.EINVAL, f"inode {ino} is not a symbolic link")

    def getxattr(self, ino: int, name: bytes) -> bytes:
        raise FsError(errno.ENODATA, f"no attribute {name!r}")

    def listxattr(self, ino: int) -> list[bytes]:
        return []

    # ----- files --------------------------------------------------------------------------------
    def open(self, ino: int, flags: int, caller: Caller) -> OpenFile:
        """An open of a file (never a directory: see ``opendir`` in the façade). ``flags`` are
        open(2)'s; ``O_TRUNC`` with write access asks for the file to be emptied."""
        if stat.S_ISDIR(self.getattr(ino, caller).mode):
            raise FsError(errno.EISDIR, f"inode {ino} is a directory")
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise FsError(errno.EACCES, f"inode {ino} is read-only")
        return self._refuse("opening a file")

    def fsync_dir(self, ino: int, datasync: bool) -> None:
        """fsync of a directory of the subtree."""

    # ----- changes (refused unless overridden) --------------------------------------------------
    def create(self, parent: int, name: bytes, mode: int, caller: Caller, rdev: int = 0,
               target: bytes | None = None) -> Inode:
        """A new entry of any type by ``mode`` (a symbolic link when ``target`` is given)."""
        return self._refuse("creating an entry")

    def link(self, ino: int, parent: int, name: bytes, caller: Caller) -> Inode:
        return self._refuse("a hard link")

    def unlink(self, parent: int, name: bytes, caller: Caller) -> None:
        self._refuse("removing an entry")

    def rmdir(self, parent: int, name: bytes, caller: Caller) -> None:
        self._refuse("removing a directory")

    def rename(self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes, flags: int,
               caller: Caller) -> None:
        self._refuse("renaming")

    def setattr(self, ino: int, changes: dict, caller: Caller) -> Inode:
        """``changes``: the keywords of ``FileSystem.setattr`` that were given."""
        return self._refuse("changing attributes")

    def setxattr(self, ino: int, name: bytes, value: bytes, flags: int) -> None:
        self._refuse("setting an attribute")

    def removexattr(self, ino: int, name: bytes) -> None:
        self._refuse("removing an attribute")

    # ----- reference counts ---------------------------------------------------------------------
    def ref(self, ino: int, n: int) -> None:
        """The kernel took ``n`` lookup references (or an open did). Count only: no waiting."""

    def unref(self, ino: int, n: int) -> bool:
        """The kernel dropped ``n``. True: run :meth:`collect` (in a worker). Count only."""
        return False

    def collect(self, ino: int) -> None:
        """``ino`` lost its last reference: free what it held if nothing names it."""

    # ----- life ---------------------------------------------------------------------------------
    def close(self) -> None:
        """The filesystem is closing cleanly (before its engine stops): finish and let go."""


def check_tag(subtree: Subtree) -> None:
    """A subtree's tag must fit below the tree's first readdir cookie (``DOTS + tag`` is the root
    entry's)."""
    if not 0 < subtree.tag < FIRST_COOKIE - DOTS:
        raise ValueError(f"subtree {subtree.name!r}: tag {subtree.tag} is not in 1..{FIRST_COOKIE - DOTS - 1}")

"""``/.snapshots``: one read-only directory per snapshot, the root of the tree as it was.

* ``mkdir /.snapshots/NAME`` takes a snapshot (``fs/snapshot_store.py``: constant time, durable
  when it returns; EEXIST for a name taken, ENAMETOOLONG over 255 bytes); ``rmdir`` deletes it
  and frees what only it held. Nothing else can be created or removed there (EROFS; ``unlink``
  of a snapshot: EISDIR; of a name that is none: ENOENT).
* ``/.snapshots/NAME/...`` serves lookups, attributes, listings (with ``.`` and ``..``), reads
  (checksums verified), symbolic links and xattrs through ``fs/snapshot_view.py``; every change
  is refused with EROFS, and a rename or link into or out of ``/.snapshots`` with EXDEV (the
  façade's rule for crossing a subtree).
* **Inode numbers** are ``subtree_ino(2, id << 32 | tree inode)`` (the snapshot's id is its
  epoch, below 2^16; the top is local number 1): stable across remounts. A tree inode number of
  2^31 or more cannot be numbered so (2^31 and up number the frozen queues and tables):
  EOVERFLOW for its lookup, and listings leave it out (the tree hands numbers out from 2
  upwards in blocks of 1024; reaching 2^31 takes two billion creates).
* ``trax.snapshot`` of ``/.snapshots/NAME`` (computed, not listed): name, id, creation time and
  the bytes only that snapshot holds, as JSON (``trax snapshot list`` reads it).
* ``/.snapshots/NAME/tables/`` holds the tables as the snapshot froze them (their versions
  were recorded in its create transaction: ``fs/tables/frozen.py``): ``rows.csv``,
  ``rows.jsonl``, ``columns/...``, ``schema`` and ``status.json`` show that version's rows. Its
  numbers are the snapshot-local numbers with bit 31 set (tree inodes of 2^31 or more have none
  here). A table a snapshot holds cannot be removed (EBUSY) until the snapshot is deleted.
* ``/.snapshots/NAME/queues/`` holds the queues as the snapshot froze them
  (``fs/queues/frozen.py``): each queue's sealed ``segments/`` then and its ``status.json`` then;
  the snapshot pins those records against retention, and a queue it holds cannot be removed
  (EBUSY). Numbers with bits 31 and 30 set. The tree's own ``queues`` and ``tables`` entries of a
  snapshot's root (mkfs's plain folders) are hidden by these, as ``/queues`` and ``/tables`` hide
  them in the live root.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time

from ..engine.page import PAGE_SIZE
from ..errors import FsError
from ..keys import DOTS, Inode
from ..limits import ROOT_INO
from ..snapshot_view import SnapshotView
from .protocol import LOCAL_MASK, Caller, OpenFile, Subtree, read_only_dir, subtree_ino

TREE_BITS = 32
FROZEN = 1 << 31  # snapshot-local numbers of the frozen tables (fs/tables/frozen.py)
TABLES_NAME = b"tables"
TABLES_COOKIE = DOTS + 5  # the tables' entry in a snapshot's root (the live root's cookie for /tables)
QUEUES = FROZEN | 1 << 30  # ... of the frozen queues (fs/queues/frozen.py)
QUEUES_NAME = b"queues"
QUEUES_COOKIE = DOTS + 3
INFO_XATTR = b"trax.snapshot"


class SnapshotFile(OpenFile):
    """A file of a snapshot, open for reading. Its bytes never change: the kernel may keep them."""

    keep_cache = True

    def __init__(self, view: SnapshotView, epoch: int, ino: int) -> None:
        self.view, self.epoch, self.ino = view, epoch, ino

    def read(self, off: int, size: int) -> bytes:
        return self.view.read(self.epoch, self.ino, off, size)

    def write(self, off: int, data: bytes) -> int:
        raise FsError(errno.EROFS, "a snapshot is read-only")


class Snapshots(Subtree):
    name = b".snapshots"
    tag = 2
    refuse_errno = errno.EROFS

    def __init__(self, view: SnapshotView) -> None:
        self.view = view
        self.store = view.store
        self._made_ns = time.time_ns()
        self.tables = None  # fs/tables/frozen.FrozenTables, when the filesystem serves /tables
        self.queues = None  # fs/queues/frozen.FrozenQueues, when it serves /queues

    # ----- numbers ------------------------------------------------------------------------------
    def _ino(self, epoch: int, tree_ino: int) -> int:
        if tree_ino >= FROZEN:
            raise FsError(errno.EOVERFLOW, f"inode {tree_ino} of a snapshot has no number in /.snapshots")
        return subtree_ino(self.tag, epoch << TREE_BITS | tree_ino)

    @staticmethod
    def _split(ino: int) -> tuple[int, int]:
        local = ino & LOCAL_MASK
        return local >> TREE_BITS, local & ((1 << TREE_BITS) - 1)

    def _attrs(self, epoch: int, tree_ino: int) -> Inode:
        """A tree inode as the snapshot saw it (EOVERFLOW: it has no number here)."""
        self._ino(epoch, tree_ino)
        node = self.view.attrs(epoch, tree_ino)
        node.ino = self._ino(epoch, tree_ino)
        return node

    def _frozen(self, local: int):
        """What serves a frozen number: the queues' or the tables'."""
        got = self.queues if local & QUEUES == QUEUES else self.tables
        if got is None:
            raise FsError(errno.ENOENT, f"no frozen entry {local:#x}")
        return got

    def _frozen_attrs(self, epoch: int, local: int) -> Inode:
        snap = self.store.by_epoch(epoch)
        if snap is None:
            raise FsError(errno.ENOENT, f"snapshot {epoch} does not exist (deleted)")
        return self._frozen(local).attrs(epoch, local, subtree_ino(self.tag, epoch << TREE_BITS | local), snap.created_ns)

    def _top(self) -> Inode:
        node = read_only_dir(self.top_ino, self._made_ns)
        node.mode = stat.S_IFDIR | 0o755  # mkdir and rmdir here take and delete snapshots
        node.nlink = 2 + len(self.store.live())
        return node

    # ----- reading ------------------------------------------------------------------------------
    def getattr(self, ino: int, caller: Caller) -> Inode:
        if ino == self.top_ino:
            return self._top()
        epoch, tree_ino = self._split(ino)
        if not epoch:
            raise FsError(errno.ENOENT, f"inode {ino} does not exist")
        if tree_ino & FROZEN:  # (no tree inode has a number with bit 31: _ino)
            return self._frozen_attrs(epoch, tree_ino)
        return self._attrs(epoch, tree_ino)

    def lookup(self, parent: int, name: bytes, caller: Caller) -> Inode:
        if parent == self.top_ino:
            snap = self.store.by_name(name)
            if snap is None:
                raise FsError(errno.ENOENT, f"no snapshot {name!r}")
            return self._attrs(snap.epoch, ROOT_INO)
        epoch, tree_ino = self._split(parent)
        if name == b".." and tree_ino == ROOT_INO:
            return self._top()
        if tree_ino & FROZEN:
            self._frozen_attrs(epoch, tree_ino)
            if name == b"..":
                up = self._frozen(tree_ino).parent(epoch, tree_ino)
                return self._attrs(epoch, ROOT_INO) if up is None else self._frozen_attrs(epoch, up)
            return self._frozen_attrs(epoch, self._frozen(tree_ino).lookup(epoch, tree_ino, name))
        if tree_ino == ROOT_INO and name == TABLES_NAME and self.tables is not None:
            return self._frozen_attrs(epoch, FROZEN)
        if tree_ino == ROOT_INO and name == QUEUES_NAME and self.queues is not None:
            return self._frozen_attrs(epoch, QUEUES)
        return self._attrs(epoch, self.view.child(epoch, tree_ino, name))

    def readdir(self, ino: int, after: int, limit: int, caller: Caller) -> list[tuple[bytes, Inode, int]]:
        if ino == self.top_ino:
            out = []
            for snap in self.store.live():
                if snap.epoch > after and len(out) < limit:
                    try:
                        out.append((snap.name, self._attrs(snap.epoch, ROOT_INO), snap.epoch))
                    except FsError:  # deleted meanwhile
                        continue
            return out
        epoch, tree_ino = self._split(ino)
        if tree_ino & FROZEN:
            self._frozen_attrs(epoch, tree_ino)
            return [(name, self._frozen_attrs(epoch, local), cookie)
                    for name, local, cookie in self._frozen(tree_ino).readdir(epoch, tree_ino, after)[:limit]]
        node = self.view.attrs(epoch, tree_ino)
        if not node.is_dir:
            raise FsError(errno.ENOTDIR, f"inode {ino} is not a directory")
        out = []
        hidden = set()  # the tree's own entries the frozen ones hide (as /queues and /tables do)
        for name, served, local, cookie in ((QUEUES_NAME, self.queues, QUEUES, QUEUES_COOKIE),
                                            (TABLES_NAME, self.tables, FROZEN, TABLES_COOKIE)):
            if tree_ino == ROOT_INO and served is not None:
                hidden.add(name)
                if after < cookie and len(out) < limit:
                    out.append((name, self._frozen_attrs(epoch, local), cookie))
        for name, child, cookie in self.view.readdir(epoch, tree_ino, after, limit - len(out)):
            if name in hidden:
                continue
            try:
                out.append((name, self._attrs(epoch, child), cookie))
            except FsError as e:  # gone meanwhile, or a tree inode with no number here: left out
                if e.errno not in (errno.ENOENT, errno.EOVERFLOW):
                    raise
        return out

    def readlink(self, ino: int) -> bytes:
        epoch, tree_ino = self._split(ino)
        if tree_ino & FROZEN:
            raise FsError(errno.EINVAL, f"inode {ino} is not a symbolic link")
        return self.view.readlink(epoch, tree_ino)

    def getxattr(self, ino: int, name: bytes) -> bytes:
        if ino == self.top_ino:
            return super().getxattr(ino, name)
        epoch, tree_ino = self._split(ino)
        if tree_ino & FROZEN:
            raise FsError(errno.ENODATA, f"no attribute {name!r}")
        if name == INFO_XATTR and tree_ino == ROOT_INO:
            return self._info(epoch)
        return self.view.getxattr(epoch, tree_ino, name)

    def _info(self, epoch: int) -> bytes:
        """``trax.snapshot`` of a snapshot's directory (computed, not listed): its name, id,
        creation time and the bytes only it holds (what deleting it gives back), as JSON."""
        snap = self.store.by_epoch(epoch)
        if snap is None:
            raise FsError(errno.ENOENT, f"snapshot {epoch} does not exist")
        return json.dumps({"name": snap.name.decode(errors="surrogateescape"), "id": snap.epoch,
                           "created_ns": snap.created_ns,
                           "unique_bytes": self.store.unique_pages(epoch) * PAGE_SIZE}).encode()

    def listxattr(self, ino: int) -> list[bytes]:
        if ino == self.top_ino:
            return []
        epoch, tree_ino = self._split(ino)
        if tree_ino & FROZEN:
            return []
        return self.view.listxattr(epoch, tree_ino)

    def open(self, ino: int, flags: int, caller: Caller) -> OpenFile:
        node = self.getattr(ino, caller)
        if node.is_dir:
            raise FsError(errno.EISDIR, f"inode {ino} is a directory")
        if flags & (os.O_WRONLY | os.O_RDWR) or flags & os.O_TRUNC:
            raise FsError(errno.EROFS, "a snapshot is read-only")
        epoch, tree_ino = self._split(ino)
        if tree_ino & FROZEN:
            return self._frozen(tree_ino).open(epoch, tree_ino, flags)
        return SnapshotFile(self.view, epoch, tree_ino)

    # ----- taking and deleting snapshots --------------------------------------------------------
    def create(self, parent: int, name: bytes, mode: int, caller: Caller, rdev: int = 0,
               target: bytes | None = None) -> Inode:
        if parent != self.top_ino or target is not None or not stat.S_ISDIR(mode):
            self._refuse("creating anything but a snapshot (mkdir /.snapshots/NAME)")
        snap = self.store.create(name)
        return self._attrs(snap.epoch, ROOT_INO)

    def rmdir(self, parent: int, name: bytes, caller: Caller) -> None:
        if parent != self.top_ino:
            self._refuse("removing a directory of a snapshot")
        self.store.delete(name)

    def unlink(self, parent: int, name: bytes, caller: Caller) -> None:
        if parent != self.top_ino:
            self._refuse("removing an entry of a snapshot")
        if self.store.by_name(name) is not None:
            raise FsError(errno.EISDIR, f"snapshot {name!r} is a directory (rmdir deletes it)")
        raise FsError(errno.ENOENT, f"no snapshot {name!r}")

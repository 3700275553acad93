"""Reading the tree as a snapshot saw it: inodes, entries, listings, symbolic links, xattrs and
file data, through the history of changed records (``fs/history.py``). Numbers here are the
tree's own inode numbers; ``fs/subtrees/snapshots.py`` gives them the subtree's.

Every lookup runs under the metadata lock, so a record and its history are read at one instant
(a change in between could otherwise move the old value into the history after the history was
looked at). File data is read outside it: the pages a snapshot sees are never written again
(copy-on-write) and not freed while it lives (the dead list)."""

from __future__ import annotations

import errno

from .engine.page import PAGE_SIZE
from .errors import FsError
from .history import HistoryTree, snapshot_get, snapshot_items
from .inodes import Inodes
from .keys import (
    U64,
    Inode,
    cookie_key,
    dirent_key,
    extent_key,
    ino_key,
    prefix_range,
    unpack_extent,
    xattr_key,
)
from .limits import NAME_MAX
from .snapshot_store import SnapshotStore
from .xattrs import LAST_CHUNK, XATTR_NAMESPACES


class SnapshotView:
    def __init__(self, inodes: Inodes, store: SnapshotStore) -> None:
        self.inodes = inodes
        self.store = store
        self.t: dict[str, HistoryTree] = inodes.t
        self.data = inodes.data

    def _live(self, epoch: int) -> None:
        if self.store.by_epoch(epoch) is None:
            raise FsError(errno.ENOENT, f"snapshot {epoch} does not exist (deleted)")

    def get(self, epoch: int, tree: str, key: bytes) -> bytes | None:
        return snapshot_get(self.t[tree], epoch, key)

    def items(self, epoch: int, tree: str, lo: bytes, hi: bytes):
        return snapshot_items(self.t[tree], epoch, lo, hi)

    # ----- the namespace ------------------------------------------------------------------------
    def attrs(self, epoch: int, ino: int) -> Inode:
        """Inode ``ino`` as snapshot ``epoch`` saw it, with ``blocks``."""
        with self.inodes.lock:
            self._live(epoch)
            raw = self.get(epoch, "inodes", ino_key(ino))
            if raw is None:
                raise FsError(errno.ENOENT, f"inode {ino} does not exist in snapshot {epoch}")
            node = Inode.unpack(ino, raw)
            if node.is_reg:
                pages = sum(unpack_extent(v)[1] for _, v in self.items(epoch, "extents", *prefix_range(ino)))
                node.blocks = pages * (PAGE_SIZE // 512)
            return node

    def child(self, epoch: int, parent: int, name: bytes) -> int:
        if len(name) > NAME_MAX:
            raise FsError(errno.ENAMETOOLONG, f"name of {len(name)} bytes (limit {NAME_MAX})")
        with self.inodes.lock:
            self._live(epoch)
            raw = self.get(epoch, "dirents", dirent_key(parent, name))
        if raw is None:
            raise FsError(errno.ENOENT, f"{name!r} not found in directory {parent} of snapshot {epoch}")
        return U64.unpack(raw[:8])[0]

    def readdir(self, epoch: int, ino: int, after: int, limit: int) -> list[tuple[bytes, int, int]]:
        """Up to ``limit`` entries (name, inode, cookie) of directory ``ino`` past ``after``."""
        out = []
        with self.inodes.lock:
            self._live(epoch)
            lo, hi = cookie_key(ino, after + 1), prefix_range(ino)[1]
            for k, name in self.items(epoch, "cookies", lo, hi):
                raw = self.get(epoch, "dirents", dirent_key(ino, name))
                if raw is None:
                    continue
                out.append((name, U64.unpack(raw[:8])[0], int.from_bytes(k[8:], "big")))
                if len(out) >= limit:
                    break
        return out

    def readlink(self, epoch: int, ino: int) -> bytes:
        with self.inodes.lock:
            node = self.attrs(epoch, ino)
            if not node.is_link:
                raise FsError(errno.EINVAL, f"inode {ino} is not a symbolic link")
            return b"".join(v for _, v in self.items(epoch, "symlinks", *prefix_range(ino)))

    def getxattr(self, epoch: int, ino: int, name: bytes) -> bytes:
        with self.inodes.lock:
            self.attrs(epoch, ino)
            lo = xattr_key(ino, name, 0)
            chunks = list(self.items(epoch, "xattrs", lo, xattr_key(ino, name, LAST_CHUNK)))
        if not chunks:
            raise FsError(errno.ENODATA, f"no attribute {name!r}")
        return b"".join(v for _, v in chunks)

    def listxattr(self, epoch: int, ino: int) -> list[bytes]:
        with self.inodes.lock:
            self.attrs(epoch, ino)
            return [k[8:-3] for k, _ in self.items(epoch, "xattrs", *prefix_range(ino))
                    if k[-2:] == b"\0\0" and k[8:].startswith(XATTR_NAMESPACES)]

    # ----- data ---------------------------------------------------------------------------------
    def read(self, epoch: int, ino: int, off: int, size: int) -> bytes:
        """Bytes of file ``ino`` as the snapshot saw them, each page verified against its sum."""
        with self.inodes.lock:
            node = self.attrs(epoch, ino)
            if node.is_dir:
                raise FsError(errno.EISDIR, f"inode {ino} is a directory")
            size = max(0, min(size, node.size - off))
            if size == 0:
                return b""
            first, stop = off // PAGE_SIZE, -(-(off + size) // PAGE_SIZE)
            floor = self._floor_extent(epoch, ino, first)
            pieces = [] if floor is None else [floor]
            for k, v in self.items(epoch, "extents", extent_key(ino, first), extent_key(ino, stop)):
                lpage = int.from_bytes(k[8:], "big")
                if floor is None or lpage != floor[0]:
                    pieces.append((lpage, *unpack_extent(v)[:2]))
        return self.data.read_pieces(ino, off, size, pieces)

    def _floor_extent(self, epoch: int, ino: int, first: int) -> tuple[int, int, int] | None:
        """The snapshot's extent of ``ino`` starting before file page ``first`` that reaches it."""
        best = None
        for k, v in self.items(epoch, "extents", extent_key(ino, 0), extent_key(ino, first)):
            best = (int.from_bytes(k[8:], "big"), *unpack_extent(v)[:2])
        if best is not None and best[0] + best[2] > first:
            return best
        return None

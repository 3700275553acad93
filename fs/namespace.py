"""The directory tree: looking names up, listing directories, creating, linking, removing and
renaming entries — each change one transaction.

A directory entry is two records: ``dirents`` (parent + name → child + readdir cookie) and
``cookies`` (parent + cookie → name). A directory's ``..`` is an entry without a cookie. An
entry's cookie is a hash of its name (``keys.name_cookie``) and never changes while the entry
exists, so a listing that runs while entries are added and removed returns every entry that
existed throughout exactly once.

Permission checks are the kernel's (``default_permissions``, sticky directories included); what
remains here is the set-group-ID inheritance of new entries and every errno POSIX gives for
structure (ENOTEMPTY, EISDIR, ENOTDIR, EEXIST, EINVAL for a directory moved into itself,
ENAMETOOLONG, ...).
"""

from __future__ import annotations

import errno
import stat

from .errors import FsError
from .inodes import FsTransaction, Inodes
from .keys import (
    CHUNK,
    COOKIE_MASK,
    FIRST_COOKIE,
    U64,
    Inode,
    chunk_key,
    cookie_key,
    dirent_key,
    ino_key,
    joined_chunks,
    name_cookie,
    prefix_range,
)
from .lifetime import Lifetime
from .limits import NAME_MAX, PATH_MAX, ROOT_INO, check_name, now_ns

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


class Namespace:
    def __init__(self, inodes: Inodes, lifetime: Lifetime) -> None:
        self.inodes = inodes
        self.t = inodes.t
        self.lifetime = lifetime

    # ----- entries ------------------------------------------------------------------------------
    def directory(self, ino: int) -> Inode:
        """A copy of directory ``ino``: ENOTDIR if it is none, ENOENT if it was removed."""
        node = self.inodes.copy(ino)
        if not node.is_dir:
            raise FsError(errno.ENOTDIR, f"inode {ino} is not a directory")
        if node.nlink == 0:
            raise FsError(errno.ENOENT, f"directory {ino} was removed")
        return node

    def child(self, parent: int, name: bytes) -> int | None:
        raw = self.t["dirents"].get(dirent_key(parent, name))
        return None if raw is None else U64.unpack(raw[:8])[0]

    def _need_child(self, parent: int, name: bytes) -> int:
        child = self.child(parent, name)
        if child is None:
            raise FsError(errno.ENOENT, f"{name!r} not found in directory {parent}")
        return child

    def add_entry(self, ftx: FsTransaction, parent: Inode, name: bytes, child: int) -> None:
        cookie = name_cookie(name)
        while self.t["cookies"].get(cookie_key(parent.ino, cookie)) is not None:
            cookie = cookie + 1 if cookie < COOKIE_MASK else FIRST_COOKIE
        self.t["dirents"].put(ftx.tx, dirent_key(parent.ino, name), U64.pack(child) + U64.pack(cookie))
        self.t["cookies"].put(ftx.tx, cookie_key(parent.ino, cookie), name)

    def set_parent(self, ftx: FsTransaction, ino: int, parent: int) -> None:
        """A directory's '..': an entry without a readdir cookie."""
        self.t["dirents"].put(ftx.tx, dirent_key(ino, b".."), U64.pack(parent) + U64.pack(0))

    def _remove_entry(self, ftx: FsTransaction, parent: int, name: bytes) -> None:
        raw = self.t["dirents"].delete(ftx.tx, dirent_key(parent, name))
        cookie = U64.unpack(raw[8:16])[0]
        self.t["cookies"].delete(ftx.tx, cookie_key(parent, cookie))

    def _is_empty(self, ino: int) -> bool:
        lo, hi = prefix_range(ino)
        return next(iter(self.t["cookies"].items(lo, hi)), None) is None

    # ----- reading ------------------------------------------------------------------------------
    def lookup(self, parent: int, name: bytes) -> Inode:
        if len(name) > NAME_MAX:
            raise FsError(errno.ENAMETOOLONG, f"name of {len(name)} bytes (limit {NAME_MAX})")
        with self.inodes.lock:
            self.directory(parent)
            return self.inodes.attrs(self._need_child(parent, name))

    def readdir(self, ino: int, after: int, limit: int) -> list[tuple[bytes, Inode, int]]:
        """Up to ``limit`` entries whose cookie is greater than ``after``, in cookie order."""
        with self.inodes.lock:
            self.directory(ino)
            out = []
            lo = cookie_key(ino, after + 1)
            hi = prefix_range(ino)[1]
            for k, name in self.t["cookies"].items(lo, hi):
                cookie = int.from_bytes(k[8:], "big")
                child = self.child(ino, name)
                if child is None:
                    continue
                out.append((name, self.inodes.attrs(child), cookie))
                if len(out) >= limit:
                    break
            return out

    def readlink(self, ino: int) -> bytes:
        with self.inodes.lock:
            node = self.inodes.get(ino)
            if not node.is_link:
                raise FsError(errno.EINVAL, f"inode {ino} is not a symbolic link")
            return joined_chunks(self.t["symlinks"], *prefix_range(ino))

    # ----- creating -----------------------------------------------------------------------------
    def create(self, parent: int, name: bytes, mode: int, uid: int, gid: int, rdev: int = 0,
               target: bytes | None = None) -> Inode:
        """A new inode named ``name`` in ``parent``: any file type by ``mode`` (regular, FIFO,
        socket, device, directory; a symbolic link when ``target`` is given)."""
        check_name(name)
        if target is not None and (len(target) >= PATH_MAX or not target):
            raise FsError(errno.ENAMETOOLONG if target else errno.ENOENT, "symlink target length")
        with self.inodes.lock:
            p = self.directory(parent)
            if self.child(parent, name) is not None:
                raise FsError(errno.EEXIST, f"{name!r} exists in directory {parent}")
            kind = stat.S_IFMT(mode) or stat.S_IFREG
            if target is not None:
                kind, mode = stat.S_IFLNK, 0o777
            if p.mode & stat.S_ISGID:  # BSD group semantics in a set-group-ID directory
                gid = p.gid
                if kind == stat.S_IFDIR:
                    mode |= stat.S_ISGID
            now = now_ns()
            with self.inodes.transaction() as ftx:
                ino = self.inodes.new_ino(ftx)
                node = Inode(ino, kind | (mode & 0o7777), uid, gid, 2 if kind == stat.S_IFDIR else 1,
                             size=len(target) if target is not None else 0, rdev=rdev, atime_ns=now,
                             mtime_ns=now, ctime_ns=now, crtime_ns=now)
                self.inodes.put(ftx, node)
                if kind == stat.S_IFDIR:
                    self.set_parent(ftx, ino, parent)
                    p.nlink += 1
                if target is not None:
                    for i in range(0, len(target), CHUNK):
                        self.t["symlinks"].put(ftx.tx, chunk_key(ino, i // CHUNK), target[i : i + CHUNK])
                self.add_entry(ftx, p, name, ino)
                p.mtime_ns = p.ctime_ns = now
                self.inodes.put(ftx, p)
            if kind == stat.S_IFREG:  # a new file holds no extents: its map needs no look at the tree
                self.inodes.data.made(ino)
            return self.inodes.attrs(ino)

    def link(self, ino: int, parent: int, name: bytes) -> Inode:
        check_name(name)
        with self.inodes.lock:
            p = self.directory(parent)
            node = self.inodes.copy(ino)
            if node.is_dir:
                raise FsError(errno.EPERM, "hard links to directories are not allowed")
            if node.nlink == 0:
                raise FsError(errno.ENOENT, f"inode {ino} was removed")
            if self.child(parent, name) is not None:
                raise FsError(errno.EEXIST, f"{name!r} exists in directory {parent}")
            now = now_ns()
            with self.inodes.transaction() as ftx:
                node.nlink += 1
                node.ctime_ns = now
                self.inodes.put(ftx, node)
                self.add_entry(ftx, p, name, ino)
                p.mtime_ns = p.ctime_ns = now
                self.inodes.put(ftx, p)
                if node.nlink == 1:
                    self.t["orphans"].delete(ftx.tx, ino_key(ino))
            return self.inodes.attrs(ino)

    # ----- removing -----------------------------------------------------------------------------
    def _drop_link(self, ftx: FsTransaction, node: Inode, now: int) -> None:
        node.nlink -= 1 if not node.is_dir else node.nlink
        node.ctime_ns = now
        self.inodes.put(ftx, node)
        if node.nlink == 0:
            self.t["orphans"].put(ftx.tx, ino_key(node.ino), b"")
            self.lifetime.note_unlinked(node.ino)

    def _collect(self, node: Inode) -> None:
        """After the transaction that dropped ``node``'s last link: destroy it unless referenced."""
        if node.nlink == 0:
            self.lifetime.collect(node.ino)

    def unlink(self, parent: int, name: bytes) -> None:
        with self.inodes.lock:
            p = self.directory(parent)
            node = self.inodes.copy(self._need_child(parent, name))
            if node.is_dir:
                raise FsError(errno.EISDIR, f"{name!r} is a directory")
            now = now_ns()
            with self.inodes.transaction() as ftx:
                self._remove_entry(ftx, parent, name)
                p.mtime_ns = p.ctime_ns = now
                self.inodes.put(ftx, p)
                self._drop_link(ftx, node, now)
        self._collect(node)

    def rmdir(self, parent: int, name: bytes) -> None:
        with self.inodes.lock:
            p = self.directory(parent)
            child = self._need_child(parent, name)
            node = self.inodes.copy(child)
            if not node.is_dir:
                raise FsError(errno.ENOTDIR, f"{name!r} is not a directory")
            if not self._is_empty(child):
                raise FsError(errno.ENOTEMPTY, f"directory {name!r} is not empty")
            now = now_ns()
            with self.inodes.transaction() as ftx:
                self._remove_entry(ftx, parent, name)
                self.t["dirents"].delete(ftx.tx, dirent_key(child, b".."))
                p.nlink -= 1
                p.mtime_ns = p.ctime_ns = now
                self.inodes.put(ftx, p)
                self._drop_link(ftx, node, now)
        self._collect(node)

    # ----- rename -------------------------------------------------------------------------------
    def _is_ancestor(self, anc: int, ino: int) -> bool:
        """Is ``anc`` ``ino`` or one of its ancestors?"""
        seen = 0
        while True:
            if ino == anc:
                return True
            if ino == ROOT_INO or seen > 1 << 16:
                return False
            parent = self.child(ino, b"..")
            if parent is None:
                return False
            ino, seen = parent, seen + 1

    def rename(self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes, flags: int = 0) -> None:
        """Atomic rename, onto an existing target too (which is then unlinked in the same
        transaction); RENAME_NOREPLACE and RENAME_EXCHANGE as renameat2(2)."""
        if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE) or flags == RENAME_NOREPLACE | RENAME_EXCHANGE:
            raise FsError(errno.EINVAL, f"rename flags {flags:#x} not supported")
        check_name(new_name)
        with self.inodes.lock:
            op = self.directory(old_parent)
            np_ = op if new_parent == old_parent else self.directory(new_parent)
            src = self._need_child(old_parent, old_name)
            dst = self.child(new_parent, new_name)
            s = self.inodes.copy(src)
            if flags & RENAME_EXCHANGE:
                if dst is None:
                    raise FsError(errno.ENOENT, f"{new_name!r} not found (exchange)")
                return self._exchange(op, old_name, np_, new_name, s, self.inodes.copy(dst))
            if dst is not None and flags & RENAME_NOREPLACE:
                raise FsError(errno.EEXIST, f"{new_name!r} exists")
            if dst == src:
                return None  # two names of one inode: nothing happens (POSIX)
            if s.is_dir and self._is_ancestor(src, new_parent):
                raise FsError(errno.EINVAL, "cannot move a directory into itself")
            d = self.inodes.copy(dst) if dst is not None else None
            if d is not None:
                if s.is_dir and not d.is_dir:
                    raise FsError(errno.ENOTDIR, f"{new_name!r} is not a directory")
                if not s.is_dir and d.is_dir:
                    raise FsError(errno.EISDIR, f"{new_name!r} is a directory")
                if d.is_dir and not self._is_empty(dst):
                    raise FsError(errno.ENOTEMPTY, f"directory {new_name!r} is not empty")
                if d.is_dir and self._is_ancestor(dst, old_parent):
                    raise FsError(errno.ENOTEMPTY, f"directory {new_name!r} is not empty")
            now = now_ns()
            same = old_parent == new_parent
            with self.inodes.transaction() as ftx:
                self._remove_entry(ftx, old_parent, old_name)
                if d is not None:
                    self._remove_entry(ftx, new_parent, new_name)
                    if d.is_dir:
                        self.t["dirents"].delete(ftx.tx, dirent_key(dst, b".."))
                        np_.nlink -= 1
                    self._drop_link(ftx, d, now)
                pnode = op if same else np_
                self.add_entry(ftx, pnode, new_name, src)
                if s.is_dir and not same:
                    self.set_parent(ftx, src, new_parent)
                    op.nlink -= 1
                    np_.nlink += 1
                s.ctime_ns = now
                self.inodes.put(ftx, s)
                self._touch_parents(ftx, op, np_, now)
        if d is not None:
            self._collect(d)
        return None

    def _exchange(self, op: Inode, old_name: bytes, np_: Inode, new_name: bytes, s: Inode, d: Inode) -> None:
        if s.ino == d.ino:
            return
        if s.is_dir and self._is_ancestor(s.ino, np_.ino) or d.is_dir and self._is_ancestor(d.ino, op.ino):
            raise FsError(errno.EINVAL, "cannot move a directory into itself")
        now = now_ns()
        same = op.ino == np_.ino
        with self.inodes.transaction() as ftx:
            for parent, name, ino in ((op.ino, old_name, d.ino), (np_.ino, new_name, s.ino)):
                key = dirent_key(parent, name)
                raw = self.t["dirents"].get(key)
                self.t["dirents"].put(ftx.tx, key, U64.pack(ino) + raw[8:16])
            if not same:
                for node, parent in ((s, np_), (d, op)):
                    if node.is_dir:
                        self.set_parent(ftx, node.ino, parent.ino)
                        parent.nlink += 1
                        (op if parent is np_ else np_).nlink -= 1
            for node in (s, d):
                node.ctime_ns = now
                self.inodes.put(ftx, node)
            self._touch_parents(ftx, op, np_, now)

    def _touch_parents(self, ftx: FsTransaction, op: Inode, np_: Inode, now: int) -> None:
        """A rename changes both directories' mtime and ctime (one directory if they are one)."""
        for parent in (op,) if np_ is op or np_.ino == op.ino else (op, np_):
            parent.mtime_ns = parent.ctime_ns = now
            self.inodes.put(ftx, parent)

"""The POSIX filesystem on the transactional engine (SPEC §4), independent of FUSE.

Every metadata operation is one engine transaction: it either happens whole or not at all,
across crashes too. Transactions are committed *softly* (the commit record is in the log buffer,
locks are released early); the log daemon makes them durable within ``commit_interval`` seconds
(the periodic commit that bounds what an unclean stop loses), and ``fsync`` forces the log at
once (group commit: concurrent fsyncs share one flush). Data bytes go straight to the volume,
in ordered mode (``fs/datamap.py``).

Concurrency: one metadata lock serialises the B+tree work of all operations (the GIL would
serialise it anyway); device I/O and durability waits happen outside it, so a slow device or a
log flush delays only the request that needs it. File data additionally takes a per-inode
reader/writer lock (``fs/inode_locks.py``).

Inode lifetime: an inode whose link count drops to zero is put on the ``orphans`` tree in the
same transaction. It is destroyed (data freed) when nobody references it any more — the FUSE
layer counts the kernel's lookups and open handles through :meth:`ref` / :meth:`unref` — or, if
the daemon died with it open, at the next mount.

Permission checks are the kernel's (``default_permissions``); this layer enforces the rules that
depend on the filesystem's own state: sticky directories are checked by the kernel too, so what
remains here is the set-group-ID inheritance of new entries and every errno POSIX gives for
structure (ENOTEMPTY, EISDIR, EXDEV-free renames, ENAMETOOLONG, ...).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from traxfs.fs.datamap import DataMap, WritePlan
from traxfs.fs.datasums import DataSums
from traxfs.fs.engine import nowait
from traxfs.fs.engine.alloc import NoSpace
from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.logmanager import GroupCommitPolicy, LogFull
from traxfs.fs.engine.page import PAGE_SIZE, PageCorrupt
from traxfs.fs.errors import FsDamaged, FsError, NotTraxfs
from traxfs.fs.inode_locks import InodeLocks
from traxfs.fs.keys import (
    CHUNK,
    COOKIE_MASK,
    EXTENT,
    FIRST_COOKIE,
    U64,
    Inode,
    chunk_key,
    cookie_key,
    dirent_key,
    ino_key,
    name_cookie,
    prefix_range,
    xattr_key,
)
from traxfs.fs.trees import KEY_NEXT_INO, create_trees, open_trees, upgrade
from traxfs.volume.overlay import OverlayDevice

log = logging.getLogger("traxfs.fs")

ROOT_INO = 1
NAME_MAX = 255
PATH_MAX = 4096
XATTR_NAME_MAX = 255
XATTR_SIZE_MAX = 65536
MAX_FILE_SIZE = 1 << 50
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
XATTR_NAMESPACES = (b"user.", b"trusted.", b"security.")  # system.* would be ACLs: not supported
XATTR_CREATE = 1
XATTR_REPLACE = 2
INO_BATCH = 1024
RESERVED_ROOT_DIRS = ("queues", "tables")  # created by mkfs; filled by later layers


@dataclass
class StatFs:
    block_size: int
    blocks: int
    blocks_free: int
    files: int
    files_free: int
    name_max: int = NAME_MAX


def _now() -> int:
    return time.time_ns()


def _look_for_damage(engine: Engine, where: str, checking: bool) -> None:
    """Mount's quick look (on the probe engine): the catalog, every tree's header and root, the
    superblock record, the allocation maps, and the damage mark the engine keeps. Refuses with
    :class:`FsDamaged`."""
    try:
        trees, _ = open_trees(engine, where, checking)
        if checking:
            return
        for tree in trees.values():
            tree.verify_root()
        for pid in engine.engine_pages()[1:]:  # the allocation maps (every allocation reads them)
            with engine.page(pid):
                pass
    except PageCorrupt as e:
        if checking:
            raise NotTraxfs(f"{where}: {e}: the filesystem's trees cannot be found; fsck cannot check it") from None
        raise FsDamaged(where, str(e)) from None
    if engine.sb.errors and not checking:
        raise FsDamaged(where, f"{engine.sb.errors} damaged page(s) met while it was in use, the first page "
                               f"{engine.sb.error_page}")


def _check_name(name: bytes) -> None:
    if len(name) > NAME_MAX:
        raise FsError(errno.ENAMETOOLONG, f"name of {len(name)} bytes (limit {NAME_MAX})")
    if not name or b"/" in name or b"\0" in name or name in (b".", b".."):
        raise FsError(errno.EINVAL, f"invalid name {name!r}")


class FileSystem:
    # ----- creating and opening -----------------------------------------------------------------
    @staticmethod
    def mkfs(dev, *, log_size: int | None = None, label: str = "", where: str = "") -> str:
        """Format ``dev`` (an open volume or image device) with an empty filesystem; returns
        its UUID. Everything on the device is lost. Errors name ``where`` (default: the
        device's path)."""
        where = where or dev.path
        if len(label.encode()) > 32:
            raise ValueError(f"{where}: label {label!r} is longer than 32 bytes")
        if log_size is None:
            log_size = min(256 << 20, max(16 << 20, dev.size // 16))
        Engine.format(dev, log_size=log_size, name=where)
        eng = Engine.open(dev, name=where)
        try:
            tx = eng.begin()
            trees, sb = create_trees(eng, tx, label)
            now = _now()
            root = Inode(ROOT_INO, stat.S_IFDIR | 0o755, 0, 0, 2, atime_ns=now, mtime_ns=now, ctime_ns=now,
                         crtime_ns=now)
            trees["inodes"].put(tx, ino_key(ROOT_INO), root.pack())
            trees["dirents"].put(tx, dirent_key(ROOT_INO, b".."), U64.pack(ROOT_INO) + U64.pack(0))
            trees["meta"].put(tx, KEY_NEXT_INO, U64.pack(ROOT_INO + 1))
            eng.commit(tx)
            fs = FileSystem(eng, trees, sb)
            for name in RESERVED_ROOT_DIRS:
                fs.mkdir(ROOT_INO, name.encode(), 0o755, 0, 0)
            fs.close()
        except BaseException:
            if not eng.closed:
                eng.unclean_shutdown()
            raise
        return sb.uuid

    @classmethod
    def open(cls, dev, *, commit_interval: float = 1.0, buffer_pages: int = 16384, where: str = "",
             checking: bool = False) -> FileSystem:
        """Open (recovering the engine if it was not shut down cleanly) and reap orphans.

        The engine is first opened on an :class:`OverlayDevice` (recovery included, nothing
        written to ``dev``) to check that it holds a healthy filesystem: a refused open, a
        foreign or damaged device, changes nothing. Damage is refused with :class:`FsDamaged`
        (pointing at fsck): a damaged page on the way to any tree's root, or a filesystem
        whose engine recorded damage while it was in use.

        ``checking`` (fsck): open whatever can be opened — a filesystem marked damaged, a
        damaged ``meta`` tree (``sb`` None) — and leave everything as found: no orphans reaped,
        damaged pages reported by fsck rather than recorded in the superblock."""
        if not 0 < commit_interval < float("inf"):  # the flusher waits commit_interval / 2 per round
            raise ValueError(f"commit interval must be a positive number of seconds (got {commit_interval})")
        where = where or dev.path
        try:
            # a look only (record_damage=False): what it finds is said below, once
            probe = Engine.open(OverlayDevice(dev), name=where, buffer_pages=buffer_pages, record_damage=False)
        except PageCorrupt as e:  # recovery (undoing a loser) met a damaged page
            raise FsDamaged(where, f"{e}, met by recovery") from None
        try:
            _look_for_damage(probe, where, checking)
        finally:
            probe.unclean_shutdown()
        policy = GroupCommitPolicy(max_commits=1 << 30, max_bytes=4 << 20, max_delay=commit_interval)
        eng = Engine.open(dev, name=where, buffer_pages=buffer_pages, policy=policy, record_damage=not checking)
        try:
            trees, sb = open_trees(eng, where, checking)
            if sb is not None and sb.version == 1:
                trees, sb = upgrade(eng, trees, sb)
                log.warning("%s: filesystem format upgraded from version 1 to 2 (data checksums); data written "
                            "before has none and reads of it count as unverified until it is rewritten", where)
            fs = cls(eng, trees, sb)
            fs.resolve_pending()  # overwrite intents a crash left: part of recovery, also for fsck
            if not checking:
                fs.reap_orphans()
                if eng.crashed:
                    fs.give_back_after_crash()
            threading.Thread(target=fs._flusher, args=(commit_interval / 2,), name="inode-flusher",
                             daemon=True).start()
        except PageCorrupt as e:
            eng.unclean_shutdown()
            raise FsDamaged(where, str(e)) from None
        except BaseException:
            eng.unclean_shutdown()
            raise
        return fs

    def replace_tree(self, name: str, tree) -> None:
        """fsck rebuilt tree ``name``: use the new one from now on."""
        self.t[name] = tree
        if name == "extents":
            self.data.tree = tree
            self.data.forget_all()

    def __init__(self, engine: Engine, trees: dict, sb) -> None:
        self.e = engine
        self.t = trees
        self.sb = sb
        self.data = DataMap(engine, trees["extents"], DataSums(engine, trees["datasums"], trees["datapending"]))
        self._lock = threading.RLock()
        self._ilocks = InodeLocks()
        self._cache: dict[int, Inode] = {}
        self._dirty: set[int] = set()  # cached inodes with changes not yet logged (size, times)
        self._ino_next = self._ino_limit = 0  # the block of inode numbers being handed out
        self._stop_flusher = threading.Event()
        self._refs: dict[int, int] = {}
        self._handles: dict[int, int] = {}  # open file handles per inode (a subset of the refs)
        self.last_commit = None
        self.stats = {"transactions": 0, "aborts": 0, "fsyncs": 0}
        self.closed = False

    def close(self) -> None:
        """Clean shutdown: flush data, checkpoint, stop the engine."""
        if self.closed:
            return
        for ino in list(self.data.preallocated):
            self.give_back(ino)
        self.flush_inodes()
        with self._lock:
            self._stop_flusher.set()
            self.closed = True
            self.data.flush_data()
            self.e.close()

    def crash(self) -> None:
        """Stop without writing anything more (tests: as if the process had died)."""
        with self._lock:
            self._stop_flusher.set()
            self.closed = True
            self.e.unclean_shutdown()

    # ----- transactions and the inode cache -----------------------------------------------------
    def _begin(self):
        if self.closed:
            raise FsError(errno.EIO, "filesystem is closed")
        tx = self.e.begin()
        tx.nodes = {}  # inodes this transaction wrote: the cache takes them at commit
        tx.extent_inos = set()  # files whose extent map it changed: their cached maps are dropped ...
        tx.maps_current = set()  # ... unless the change was made to the cached copy too (kept at commit)
        tx.ino_block = None  # a block of inode numbers it reserved
        tx.data_independent = False  # True: its records describe no data written before (see _write_plan)
        return tx

    def _commit(self, tx) -> None:
        if not tx.data_independent:
            self.data.depend()
        self.last_commit = self.e.soft_commit(tx)
        self.stats["transactions"] += 1
        self._cache.update(tx.nodes)
        self._dirty.difference_update(tx.nodes)
        for ino in tx.extent_inos - tx.maps_current:
            self.data.forget(ino)

    def _abort(self, tx, ex: BaseException | None = None) -> None:
        """Roll back; the cache never saw the transaction's inodes. Engine errors that mean
        "no space" become ENOSPC."""
        self.e.abort(tx)
        self.stats["aborts"] += 1
        for ino in tx.extent_inos:
            self.data.forget(ino)
        if tx.ino_block is not None:  # the reservation was rolled back: reserve anew next time
            self._ino_next = self._ino_limit = 0
        if isinstance(ex, NoSpace):
            raise FsError(errno.ENOSPC, str(ex)) from None
        if isinstance(ex, LogFull):
            raise FsError(errno.ENOSPC, f"log full: {ex}") from None

    @contextmanager
    def _txn(self):
        """One atomic operation: commit at the end, abort on any error."""
        tx = self._begin()
        try:
            yield tx
        except BaseException as ex:
            self._abort(tx, ex)
            raise
        self._commit(tx)

    def _get(self, ino: int) -> Inode:
        node = self._cache.get(ino)
        if node is None:
            raw = self.t["inodes"].get(ino_key(ino))
            if raw is None:
                raise FsError(errno.ENOENT, f"inode {ino} does not exist")
            node = Inode.unpack(ino, raw)
            if len(self._cache) > 65536:  # forget clean inodes; dirty ones are not yet logged
                self._cache = {i: n for i, n in self._cache.items() if i in self._dirty}
            self._cache[ino] = node
        return node

    def _put(self, tx, node: Inode) -> None:
        """Log ``node`` in ``tx``, after the checksums of its data written so far (a size is never
        durable without the sums of the bytes below it). Operations read each inode once and
        then change their own copy, so nothing needs the new version before the commit hands
        it to the cache."""
        self.data.sums.log_deferred(tx, node.ino)
        self.t["inodes"].put(tx, ino_key(node.ino), node.pack())
        tx.nodes[node.ino] = node

    def flush_inodes(self) -> int:
        """Log the inodes whose size and times changed in memory only (writes into allocated
        space), in one transaction: after the data they describe, so ordered mode holds."""
        with self._lock:
            if not self._dirty or self.closed:
                return 0
            inos = sorted(self._dirty)
            with self._txn() as tx:
                for ino in inos:
                    if ino in self._cache and self.t["inodes"].get(ino_key(ino)) is not None:
                        self._put(tx, self._cache[ino])
            self._dirty.difference_update(inos)
            return len(inos)

    def _flusher(self, interval: float) -> None:
        """The periodic commit of in-memory inode changes (with the log daemon's T, the bound
        on what an unclean stop loses)."""
        while not self._stop_flusher.wait(interval):
            try:
                self.flush_inodes()
            except Exception:  # noqa: BLE001  (closed meanwhile, or out of space: next round)
                continue

    def _copy(self, ino: int) -> Inode:
        n = self._get(ino)
        return Inode(**n.__dict__)

    def _attrs(self, ino: int) -> Inode:
        """A copy for the caller, with ``blocks``: the data pages a regular file holds (its
        extent map, cached) in 512-byte units, so du and st_blocks show what is allocated."""
        node = self._copy(ino)
        if node.is_reg:
            node.blocks = self.data.allocated_pages(ino) * (PAGE_SIZE // 512)
        return node

    def _dir(self, ino: int) -> Inode:
        node = self._copy(ino)
        if not node.is_dir:
            raise FsError(errno.ENOTDIR, f"inode {ino} is not a directory")
        if node.nlink == 0:
            raise FsError(errno.ENOENT, f"directory {ino} was removed")
        return node

    def _child(self, parent: int, name: bytes) -> int | None:
        raw = self.t["dirents"].get(dirent_key(parent, name))
        return None if raw is None else U64.unpack(raw[:8])[0]

    def _need_child(self, parent: int, name: bytes) -> int:
        child = self._child(parent, name)
        if child is None:
            raise FsError(errno.ENOENT, f"{name!r} not found in directory {parent}")
        return child

    # ----- reading the namespace ----------------------------------------------------------------
    def try_now(self, fn, *args):
        """Run the read-only ``fn(*args)`` only if it needs no waiting: the filesystem lock free,
        every page it touches resident, no latch held elsewhere; else raise
        :class:`~traxfs.fs.engine.nowait.WouldBlock` having changed nothing (see
        ``traxfs.fs.engine.nowait``). The FUSE loop answers cached lookups this way."""
        if self.closed:
            raise FsError(errno.EIO, "filesystem is closed")
        if not self._lock.acquire(blocking=False):
            raise nowait.WouldBlock("the filesystem lock is held")
        try:
            with nowait.no_wait():
                return fn(*args)
        finally:
            self._lock.release()

    def getattr(self, ino: int) -> Inode:
        with self._lock:
            return self._attrs(ino)

    def lookup(self, parent: int, name: bytes) -> Inode:
        if len(name) > NAME_MAX:
            raise FsError(errno.ENAMETOOLONG, f"name of {len(name)} bytes (limit {NAME_MAX})")
        with self._lock:
            self._dir(parent)
            child = self._need_child(parent, name)
            return self._attrs(child)

    def readdir(self, ino: int, after: int, limit: int = 256) -> list[tuple[bytes, Inode, int]]:
        """Up to ``limit`` entries whose cookie is greater than ``after``, in cookie order. An
        entry's cookie never changes while it exists (``records.name_cookie``), so a listing that
        runs while entries are added and removed returns every entry that existed throughout
        exactly once."""
        with self._lock:
            self._dir(ino)
            out = []
            lo = cookie_key(ino, after + 1)
            hi = prefix_range(ino)[1]
            for k, name in self.t["cookies"].items(lo, hi):
                cookie = int.from_bytes(k[8:], "big")
                child = self._child(ino, name)
                if child is None:
                    continue
                out.append((name, self._attrs(child), cookie))
                if len(out) >= limit:
                    break
            return out

    def readlink(self, ino: int) -> bytes:
        with self._lock:
            node = self._get(ino)
            if not node.is_link:
                raise FsError(errno.EINVAL, f"inode {ino} is not a symbolic link")
            return self._read_chunks(self.t["symlinks"], *prefix_range(ino))

    def _read_chunks(self, tree, lo: bytes, hi: bytes) -> bytes:
        return b"".join(v for _, v in tree.items(lo, hi))

    # ----- creating entries ---------------------------------------------------------------------
    def _new_ino(self, tx) -> int:
        """Inode numbers are reserved in blocks of :data:`INO_BATCH`: the record moves once per
        block, not once per create. A crash skips the rest of a block; numbers are never reused."""
        if self._ino_next >= self._ino_limit:
            start = U64.unpack(self.t["meta"].get(KEY_NEXT_INO))[0]
            self.t["meta"].put(tx, KEY_NEXT_INO, U64.pack(start + INO_BATCH))
            # the block is ours only once this transaction commits (see _commit)
            tx.ino_block = (start, start + INO_BATCH)
            self._ino_next, self._ino_limit = start, start + INO_BATCH
        ino = self._ino_next
        self._ino_next += 1
        return ino

    def _add_entry(self, tx, parent: Inode, name: bytes, child: int) -> None:
        cookie = name_cookie(name)
        while self.t["cookies"].get(cookie_key(parent.ino, cookie)) is not None:
            cookie = cookie + 1 if cookie < COOKIE_MASK else FIRST_COOKIE
        self.t["dirents"].put(tx, dirent_key(parent.ino, name), U64.pack(child) + U64.pack(cookie))
        self.t["cookies"].put(tx, cookie_key(parent.ino, cookie), name)

    def _set_parent(self, tx, ino: int, parent: int) -> None:
        """A directory's '..': an entry without a readdir cookie."""
        self.t["dirents"].put(tx, dirent_key(ino, b".."), U64.pack(parent) + U64.pack(0))

    def _remove_entry(self, tx, parent: int, name: bytes) -> None:
        raw = self.t["dirents"].delete(tx, dirent_key(parent, name))
        cookie = U64.unpack(raw[8:16])[0]
        self.t["cookies"].delete(tx, cookie_key(parent, cookie))

    def create(self, parent: int, name: bytes, mode: int, uid: int, gid: int, rdev: int = 0,
               target: bytes | None = None) -> Inode:
        """A new inode named ``name`` in ``parent``: any file type by ``mode`` (regular, FIFO,
        socket, device, directory; a symbolic link when ``target`` is given)."""
        _check_name(name)
        if target is not None and (len(target) >= PATH_MAX or not target):
            raise FsError(errno.ENAMETOOLONG if target else errno.ENOENT, "symlink target length")
        with self._lock:
            p = self._dir(parent)
            if self._child(parent, name) is not None:
                raise FsError(errno.EEXIST, f"{name!r} exists in directory {parent}")
            kind = stat.S_IFMT(mode) or stat.S_IFREG
            if target is not None:
                kind, mode = stat.S_IFLNK, 0o777
            if p.mode & stat.S_ISGID:  # BSD group semantics in a set-group-ID directory
                gid = p.gid
                if kind == stat.S_IFDIR:
                    mode |= stat.S_ISGID
            now = _now()
            with self._txn() as tx:
                ino = self._new_ino(tx)
                node = Inode(ino, kind | (mode & 0o7777), uid, gid, 2 if kind == stat.S_IFDIR else 1,
                             size=len(target) if target is not None else 0, rdev=rdev, atime_ns=now,
                             mtime_ns=now, ctime_ns=now, crtime_ns=now)
                self._put(tx, node)
                if kind == stat.S_IFDIR:
                    self._set_parent(tx, ino, parent)
                    p.nlink += 1
                if target is not None:
                    for i in range(0, len(target), CHUNK):
                        self.t["symlinks"].put(tx, chunk_key(ino, i // CHUNK), target[i : i + CHUNK])
                self._add_entry(tx, p, name, ino)
                p.mtime_ns = p.ctime_ns = now
                self._put(tx, p)
            return self._attrs(ino)

    def mkdir(self, parent: int, name: bytes, mode: int, uid: int, gid: int) -> Inode:
        return self.create(parent, name, stat.S_IFDIR | (mode & 0o7777), uid, gid)

    def symlink(self, parent: int, name: bytes, target: bytes, uid: int, gid: int) -> Inode:
        return self.create(parent, name, stat.S_IFLNK | 0o777, uid, gid, target=target)

    def link(self, ino: int, parent: int, name: bytes) -> Inode:
        _check_name(name)
        with self._lock:
            p = self._dir(parent)
            node = self._copy(ino)
            if node.is_dir:
                raise FsError(errno.EPERM, "hard links to directories are not allowed")
            if node.nlink == 0:
                raise FsError(errno.ENOENT, f"inode {ino} was removed")
            if self._child(parent, name) is not None:
                raise FsError(errno.EEXIST, f"{name!r} exists in directory {parent}")
            now = _now()
            with self._txn() as tx:
                node.nlink += 1
                node.ctime_ns = now
                self._put(tx, node)
                self._add_entry(tx, p, name, ino)
                p.mtime_ns = p.ctime_ns = now
                self._put(tx, p)
                if node.nlink == 1:
                    self.t["orphans"].delete(tx, ino_key(ino))
            return self._attrs(ino)

    # ----- removing entries ---------------------------------------------------------------------
    def _drop_link(self, tx, node: Inode, now: int) -> None:
        node.nlink -= 1 if not node.is_dir else node.nlink
        node.ctime_ns = now
        self._put(tx, node)
        if node.nlink == 0:
            self.t["orphans"].put(tx, ino_key(node.ino), b"")

    def unlink(self, parent: int, name: bytes) -> None:
        with self._lock:
            p = self._dir(parent)
            child = self._need_child(parent, name)
            node = self._copy(child)
            if node.is_dir:
                raise FsError(errno.EISDIR, f"{name!r} is a directory")
            now = _now()
            with self._txn() as tx:
                self._remove_entry(tx, parent, name)
                p.mtime_ns = p.ctime_ns = now
                self._put(tx, p)
                self._drop_link(tx, node, now)
            self._maybe_destroy(child)

    def _is_empty(self, ino: int) -> bool:
        lo, hi = prefix_range(ino)
        return next(iter(self.t["cookies"].items(lo, hi)), None) is None

    def rmdir(self, parent: int, name: bytes) -> None:
        with self._lock:
            p = self._dir(parent)
            child = self._need_child(parent, name)
            node = self._copy(child)
            if not node.is_dir:
                raise FsError(errno.ENOTDIR, f"{name!r} is not a directory")
            if not self._is_empty(child):
                raise FsError(errno.ENOTEMPTY, f"directory {name!r} is not empty")
            now = _now()
            with self._txn() as tx:
                self._remove_entry(tx, parent, name)
                self.t["dirents"].delete(tx, dirent_key(child, b".."))
                p.nlink -= 1
                p.mtime_ns = p.ctime_ns = now
                self._put(tx, p)
                self._drop_link(tx, node, now)
            self._maybe_destroy(child)

    # ----- rename -------------------------------------------------------------------------------
    def _is_ancestor(self, anc: int, ino: int) -> bool:
        """Is ``anc`` ``ino`` or one of its ancestors?"""
        seen = 0
        while True:
            if ino == anc:
                return True
            if ino == ROOT_INO or seen > 1 << 16:
                return False
            parent = self._child(ino, b"..")
            if parent is None:
                return False
            ino, seen = parent, seen + 1

    def rename(self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes, flags: int = 0) -> None:
        """Atomic rename, onto an existing target too (which is then unlinked in the same
        transaction); RENAME_NOREPLACE and RENAME_EXCHANGE as renameat2(2)."""
        if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE) or flags == RENAME_NOREPLACE | RENAME_EXCHANGE:
            raise FsError(errno.EINVAL, f"rename flags {flags:#x} not supported")
        _check_name(new_name)
        with self._lock:
            op = self._dir(old_parent)
            np_ = op if new_parent == old_parent else self._dir(new_parent)
            src = self._need_child(old_parent, old_name)
            dst = self._child(new_parent, new_name)
            s = self._copy(src)
            if flags & RENAME_EXCHANGE:
                if dst is None:
                    raise FsError(errno.ENOENT, f"{new_name!r} not found (exchange)")
                return self._exchange(op, old_name, np_, new_name, s, self._copy(dst))
            if dst is not None and flags & RENAME_NOREPLACE:
                raise FsError(errno.EEXIST, f"{new_name!r} exists")
            if dst == src:
                return None  # two names of one inode: nothing happens (POSIX)
            if s.is_dir and self._is_ancestor(src, new_parent):
                raise FsError(errno.EINVAL, "cannot move a directory into itself")
            d = self._copy(dst) if dst is not None else None
            if d is not None:
                if s.is_dir and not d.is_dir:
                    raise FsError(errno.ENOTDIR, f"{new_name!r} is not a directory")
                if not s.is_dir and d.is_dir:
                    raise FsError(errno.EISDIR, f"{new_name!r} is a directory")
                if d.is_dir and not self._is_empty(dst):
                    raise FsError(errno.ENOTEMPTY, f"directory {new_name!r} is not empty")
                if d.is_dir and self._is_ancestor(dst, old_parent):
                    raise FsError(errno.ENOTEMPTY, f"directory {new_name!r} is not empty")
            now = _now()
            same = old_parent == new_parent
            with self._txn() as tx:
                self._remove_entry(tx, old_parent, old_name)
                if d is not None:
                    self._remove_entry(tx, new_parent, new_name)
                    if d.is_dir:
                        self.t["dirents"].delete(tx, dirent_key(dst, b".."))
                        np_.nlink -= 1
                    self._drop_link(tx, d, now)
                pnode = op if same else np_
                self._add_entry(tx, pnode, new_name, src)
                if s.is_dir and not same:
                    self._set_parent(tx, src, new_parent)
                    op.nlink -= 1
                    np_.nlink += 1
                s.ctime_ns = now
                self._put(tx, s)
                self._touch_parents(tx, op, np_, now)
            if d is not None:
                self._maybe_destroy(dst)
            return None

    def _exchange(self, op: Inode, old_name: bytes, np_: Inode, new_name: bytes, s: Inode, d: Inode) -> None:
        if s.ino == d.ino:
            return
        if s.is_dir and self._is_ancestor(s.ino, np_.ino) or d.is_dir and self._is_ancestor(d.ino, op.ino):
            raise FsError(errno.EINVAL, "cannot move a directory into itself")
        now = _now()
        same = op.ino == np_.ino
        with self._txn() as tx:
            for parent, name, ino in ((op.ino, old_name, d.ino), (np_.ino, new_name, s.ino)):
                key = dirent_key(parent, name)
                raw = self.t["dirents"].get(key)
                self.t["dirents"].put(tx, key, U64.pack(ino) + raw[8:16])
            if not same:
                for node, parent in ((s, np_), (d, op)):
                    if node.is_dir:
                        self._set_parent(tx, node.ino, parent.ino)
                        parent.nlink += 1
                        (op if parent is np_ else np_).nlink -= 1
            for node in (s, d):
                node.ctime_ns = now
                self._put(tx, node)
            self._touch_parents(tx, op, np_, now)

    def _touch_parents(self, tx, op: Inode, np_: Inode, now: int) -> None:
        """A rename changes both directories' mtime and ctime (one directory if they are one)."""
        for parent in (op,) if np_ is op or np_.ino == op.ino else (op, np_):
            parent.mtime_ns = parent.ctime_ns = now
            self._put(tx, parent)

    # ----- attributes ---------------------------------------------------------------------------
    def setattr(self, ino: int, *, mode: int | None = None, uid: int | None = None, gid: int | None = None,
                size: int | None = None, atime_ns: int | None = None, mtime_ns: int | None = None,
                ctime_ns: int | None = None) -> Inode:
        if size is not None:
            self.truncate(ino, size)
        with self._lock:
            node = self._copy(ino)
            now = _now()
            changed = False
            if mode is not None:
                node.mode = stat.S_IFMT(node.mode) | (mode & 0o7777)
                changed = True
            if uid is not None and uid != 0xFFFFFFFF:
                node.uid, changed = uid, True
            if gid is not None and gid != 0xFFFFFFFF:
                node.gid, changed = gid, True
            if atime_ns is not None:
                node.atime_ns, changed = atime_ns, True
            if mtime_ns is not None:
                node.mtime_ns, changed = mtime_ns, True
            if changed:
                node.ctime_ns = ctime_ns if ctime_ns is not None else now
            elif ctime_ns is not None:
                node.ctime_ns, changed = ctime_ns, True
            if changed:
                with self._txn() as tx:
                    self._put(tx, node)
            return self._attrs(ino)

    # ----- file data ----------------------------------------------------------------------------
    def read(self, ino: int, off: int, size: int) -> bytes:
        with self._ilocks.shared(ino):
            with self._lock:
                node = self._get(ino)
                if node.is_dir:
                    raise FsError(errno.EISDIR, f"inode {ino} is a directory")
                size = max(0, min(size, node.size - off))
            if size == 0:
                return b""
            return self.data.read(ino, off, size)

    def write(self, ino: int, off: int, data: bytes) -> int:
        """Write ``data`` at ``off``; returns the byte count. The bytes reach the volume before
        the records that make them reachable are logged (ordered mode)."""
        if not data:
            return 0
        if off < 0 or off + len(data) > MAX_FILE_SIZE:
            raise FsError(errno.EFBIG, f"write past the largest file size ({MAX_FILE_SIZE})")
        with self._ilocks.exclusive(ino):
            with self._lock:
                node = self._copy(ino)
                if not node.is_reg:
                    raise FsError(errno.EINVAL if not node.is_dir else errno.EISDIR, f"inode {ino} is not a file")
                tx, new = None, []
                if self.data.has_holes(ino, off, len(data)):
                    tx = self._begin()
                    try:
                        new = self.data.allocate(tx, ino, off, len(data), node.size)
                    except BaseException as ex:
                        self._abort(tx, ex)
                        raise
            try:
                plan = self.data.plan(ino, off, data, new, node.size)
                self._write_plan(plan)
            except BaseException as ex:
                if tx is not None:
                    with self._lock:
                        self._abort(tx, ex)
                raise
            with self._lock:
                node = self._copy(ino)
                node.size = max(node.size, off + len(data))
                node.mtime_ns = node.ctime_ns = _now()
                if tx is None:  # into allocated space: the new size, times and sums wait in memory
                    self.data.sums.defer(ino, plan.sums)
                    self._cache[ino] = node
                    self._dirty.add(ino)
                    return len(data)
                try:
                    self.data.publish(tx, ino, new)
                    self.data.sums.record(tx, plan.sums)
                    self._put(tx, node)
                except BaseException as ex:
                    self._abort(tx, ex)
                    raise
                self._commit(tx)
        return len(data)

    def seek(self, ino: int, off: int, whence: int) -> int:
        """``lseek(2)``'s ``SEEK_DATA`` / ``SEEK_HOLE`` from the extent map: a mapped page is
        data (also the zeros a write into a hole fills its window with, as ext4 counts written
        extents), an unmapped page is a hole, and so is everything from the size on (pages
        preallocated past it are not data). An offset at or past the size is ENXIO."""
        if whence not in (os.SEEK_DATA, os.SEEK_HOLE):
            raise FsError(errno.EINVAL, f"lseek whence {whence}: only SEEK_DATA and SEEK_HOLE come here")
        with self._ilocks.shared(ino):
            with self._lock:
                node = self._get(ino)
                if not node.is_reg:
                    raise FsError(errno.EINVAL, f"inode {ino} is not a regular file")
                size = node.size
            if off < 0 or off >= size:
                raise FsError(errno.ENXIO, f"offset {off} is outside the file (size {size})")
            first, stop = off // PAGE_SIZE, -(-size // PAGE_SIZE)
            if whence == os.SEEK_DATA:
                page = self.data.first_data(ino, first, stop)
                if page is None:
                    raise FsError(errno.ENXIO, f"no data from offset {off} to the end (size {size})")
                return max(off, page * PAGE_SIZE)
            return min(max(off, self.data.first_hole(ino, first, stop) * PAGE_SIZE), size)

    def _write_plan(self, plan: WritePlan) -> None:
        """Write planned data (``DataMap.plan``). Overwrites of checksummed bytes first log
        their intents and wait until those are durable — one log force, shared with concurrent
        committers, and no device flush (intents describe no data): a crash then finds a sum
        for the old bytes and one for the new. The caller then logs the plan's sums (with the
        transaction that publishes the write, or deferred to the inode's next record)."""
        intents = plan.intents
        if intents:
            if self.data.sums.any_deferred(intents):
                # an intent keeps the page's current sum as the alternative, so the bytes that sum
                # describes must be on disk first (a page rewritten again before its last write
                # was flushed); otherwise a crash could leave older bytes that match neither
                self.data.flush_data()
            with self._lock:
                with self._txn() as tx:
                    tx.data_independent = True
                    self.data.sums.record(tx, intents)
                lsn = self.last_commit.lsn
            self.e.make_durable(lsn)
        self.data.write_plan(plan)

    def truncate(self, ino: int, size: int) -> None:
        if size < 0 or size > MAX_FILE_SIZE:
            raise FsError(errno.EFBIG if size > 0 else errno.EINVAL, f"size {size}")
        with self._ilocks.exclusive(ino):
            with self._lock:
                node = self._copy(ino)
                if node.is_dir:
                    raise FsError(errno.EISDIR, f"inode {ino} is a directory")
                if not node.is_reg:
                    raise FsError(errno.EINVAL, f"inode {ino} is not a regular file")
            if size > node.size:  # what the new size exposes is zeroed first (inode lock held)
                plan = self.data.plan_zero(ino, node.size, size)
                self._write_plan(plan)
            with self._lock:
                grow = size > node.size
                node = self._copy(ino)
                with self._txn() as tx:
                    if grow:
                        self.data.sums.record(tx, plan.sums)
                    if size < node.size:
                        self.data.truncate(tx, ino, size)
                    node.size = size
                    node.mtime_ns = node.ctime_ns = _now()
                    self._put(tx, node)

    # ----- lifetime -----------------------------------------------------------------------------
    def ref(self, ino: int, n: int = 1) -> None:
        with self._lock:
            self._refs[ino] = self._refs.get(ino, 0) + n

    def unref(self, ino: int, n: int = 1) -> None:
        with self._lock:
            left = self._refs.get(ino, 0) - n
            if left > 0:
                self._refs[ino] = left
                return
            self._refs.pop(ino, None)
        self._maybe_destroy(ino)

    def open_handle(self, ino: int) -> None:
        """An open file handle: a reference, also counted apart so that the last close can give
        back what was preallocated past the file's end."""
        with self._lock:
            self._handles[ino] = self._handles.get(ino, 0) + 1
            self._refs[ino] = self._refs.get(ino, 0) + 1

    def has_preallocation(self, ino: int) -> bool:
        """Cheap (no lock, no I/O): may ``ino`` hold pages past its end?"""
        return ino in self.data.preallocated

    def flush_handle(self, ino: int) -> None:
        """close(2) of a descriptor of ``ino``. If this is its only open handle, the
        preallocation goes now: the kernel waits for flush, but not for release, so a stat
        right after close already sees the file's true size on disk."""
        if self._handles.get(ino) == 1:
            self.give_back(ino)

    def release_handle(self, ino: int) -> None:
        """The kernel dropped an open handle; the last one gives the preallocation back."""
        with self._lock:
            left = self._handles.get(ino, 0) - 1
            if left > 0:
                self._handles[ino] = left
            else:
                self._handles.pop(ino, None)
        if left <= 0:
            self.give_back(ino)
        self.unref(ino)

    def give_back(self, ino: int) -> int:
        """Free the pages preallocated past the end of ``ino`` (one transaction, which logs the
        inode's in-memory size too); returns the pages freed. A file grown by appends keeps
        its preallocation while open, and takes its size rounded up to pages once closed."""
        if ino not in self.data.preallocated:
            return 0
        with self._ilocks.exclusive(ino), self._lock:
            self.data.preallocated.discard(ino)
            if self.closed or self.t["inodes"].get(ino_key(ino)) is None:
                return 0  # closed meanwhile, or destroyed (its pages went with it)
            node = self._copy(ino)
            with self._txn() as tx:
                freed = self.data.truncate(tx, ino, node.size)
                if ino in self._dirty:
                    self._put(tx, node)
            return freed

    def give_back_after_crash(self) -> int:
        """At mount after an unclean stop: files open then may hold pages preallocated past
        their end (given back at a last close that never came). One pass over the extents tree
        (in inode order) finds them; each is given back. Returns the pages freed."""
        def past_end(ino: int, end: int) -> bool:
            raw = self.t["inodes"].get(ino_key(ino))
            return raw is not None and end > -(-Inode.unpack(ino, raw).size // PAGE_SIZE)

        found: list[int] = []
        ino, end = None, 0
        for k, v in self.t["extents"].items():
            key_ino = U64.unpack(k[:8])[0]
            if key_ino != ino:
                if ino is not None and past_end(ino, end):
                    found.append(ino)
                ino, end = key_ino, 0
            end = max(end, U64.unpack(k[8:16])[0] + EXTENT.unpack(v)[1])
        if ino is not None and past_end(ino, end):
            found.append(ino)
        self.data.preallocated.update(found)
        return sum(self.give_back(i) for i in found)

    def _maybe_destroy(self, ino: int) -> None:
        with self._ilocks.exclusive(ino), self._lock:
            if self._refs.get(ino) or self.closed:
                return
            raw = self.t["inodes"].get(ino_key(ino))
            if raw is None:
                return
            node = Inode.unpack(ino, raw)
            if node.nlink:
                return
            self._destroy(node)

    def _destroy(self, node: Inode) -> None:
        ino = node.ino
        with self._txn() as tx:
            if node.is_reg:
                self.data.truncate(tx, ino, 0)
            for tree in (self.t["xattrs"], self.t["symlinks"]):
                for k in list(tree.keys(*prefix_range(ino))):
                    tree.delete(tx, k)
            self.t["inodes"].delete(tx, ino_key(ino))
            self.t["orphans"].delete(tx, ino_key(ino))
        self._cache.pop(ino, None)
        self._dirty.discard(ino)

    def resolve_pending(self) -> int:
        """At mount: settle the checksums of overwrites a crash interrupted (``DataSums``)."""
        with self._lock, self._txn() as tx:
            return self.data.sums.resolve_pending(tx)

    def reap_orphans(self) -> int:
        """At mount: destroy inodes that were unlinked while open when the daemon stopped."""
        n = 0
        with self._lock:
            for k in list(self.t["orphans"].keys()):
                raw = self.t["inodes"].get(k)
                ino = U64.unpack(k)[0]
                if raw is None:
                    with self._txn() as tx:
                        self.t["orphans"].delete(tx, k)
                    continue
                node = Inode.unpack(ino, raw)
                if node.nlink == 0:
                    self._destroy(node)
                    n += 1
        return n

    # ----- extended attributes ------------------------------------------------------------------
    def getxattr(self, ino: int, name: bytes) -> bytes:
        self._check_xattr_name(name)
        with self._lock:
            self._get(ino)
            lo = xattr_key(ino, name, 0)
            value = self._read_chunks(self.t["xattrs"], lo, xattr_key(ino, name, 0xFFFF))
            if not value and self.t["xattrs"].get(lo) is None:
                raise FsError(errno.ENODATA, f"no attribute {name!r}")
            return value

    def listxattr(self, ino: int) -> list[bytes]:
        with self._lock:
            self._get(ino)
            names = []
            for k, _ in self.t["xattrs"].items(*prefix_range(ino)):
                if k[-2:] == b"\0\0":
                    names.append(k[8:-3])
            return names

    @staticmethod
    def _check_xattr_name(name: bytes) -> None:
        if not name or len(name) > XATTR_NAME_MAX:
            raise FsError(errno.ERANGE, f"attribute name of {len(name)} bytes")
        if not name.startswith(XATTR_NAMESPACES):
            raise FsError(errno.EOPNOTSUPP, f"attribute namespace of {name!r} not supported")

    def setxattr(self, ino: int, name: bytes, value: bytes, flags: int = 0) -> None:
        self._check_xattr_name(name)
        if b"\0" in name:
            raise FsError(errno.EINVAL, "attribute name contains NUL")
        if len(value) > XATTR_SIZE_MAX:
            raise FsError(errno.E2BIG, f"attribute value of {len(value)} bytes (limit {XATTR_SIZE_MAX})")
        with self._lock:
            node = self._copy(ino)
            exists = self.t["xattrs"].get(xattr_key(ino, name, 0)) is not None
            if flags & XATTR_CREATE and exists:
                raise FsError(errno.EEXIST, f"attribute {name!r} exists")
            if flags & XATTR_REPLACE and not exists:
                raise FsError(errno.ENODATA, f"no attribute {name!r}")
            with self._txn() as tx:
                self._del_xattr(tx, ino, name)
                chunks = [value[i : i + CHUNK] for i in range(0, len(value), CHUNK)] or [b""]
                for i, c in enumerate(chunks):
                    self.t["xattrs"].put(tx, xattr_key(ino, name, i), c)
                node.ctime_ns = _now()
                self._put(tx, node)

    def _del_xattr(self, tx, ino: int, name: bytes) -> bool:
        keys = list(self.t["xattrs"].keys(xattr_key(ino, name, 0), xattr_key(ino, name, 0xFFFF)))
        for k in keys:
            self.t["xattrs"].delete(tx, k)
        return bool(keys)

    def removexattr(self, ino: int, name: bytes) -> None:
        self._check_xattr_name(name)
        with self._lock:
            node = self._copy(ino)
            with self._txn() as tx:
                if not self._del_xattr(tx, ino, name):
                    raise FsError(errno.ENODATA, f"no attribute {name!r}")
                node.ctime_ns = _now()
                self._put(tx, node)

    # ----- durability and space -----------------------------------------------------------------
    def fsync(self, ino: int | None = None, datasync: bool = False) -> None:
        """Make everything written so far durable: the data first, then the log up to now.
        (The log is one sequence: forcing it for this inode forces every earlier change too.)"""
        self.stats["fsyncs"] += 1
        self.flush_inodes()
        self.data.flush_data()
        self.e.make_durable()

    def sync(self) -> None:
        self.fsync()

    def statfs(self) -> StatFs:
        with self._lock:
            free = self.e.free_pages()
            total = self.e.page_count
            return StatFs(PAGE_SIZE, total, free, total, free)

    def status(self) -> dict:
        """Counters for /.trax/: engine, buffer, log, data, filesystem."""
        with self._lock:
            return {"filesystem": {"uuid": self.sb.uuid, "label": self.sb.label, "version": self.sb.version,
                                   **self.stats, "cached_inodes": len(self._cache), "dirty_inodes": len(self._dirty),
                                   "referenced_inodes": len(self._refs)},
                    "data": {**self.data.stats, **self.data.sums.stats, "track_pages": self.data.track,
                             "quarantined_pages": self.e.quarantined_pages()},
                    **self.e.stats()}

    def iter_inodes(self) -> Iterator[Inode]:
        for k, v in self.t["inodes"].items():
            yield Inode.unpack(U64.unpack(k)[0], v)

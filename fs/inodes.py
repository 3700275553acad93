"""Transactions, the inode cache and the inode flusher: what every filesystem operation shares.

**The metadata lock** (:attr:`Inodes.lock`) serialises the B+tree work of all operations (the GIL
would serialise it anyway); device I/O and durability waits happen outside it, so a slow device
or a log flush delays only the request that needs it. Reference counts have a lock of their own
(``fs/lifetime.py``), never held across a wait.

**Transactions.** Every metadata operation is one :class:`FsTransaction`: the engine's
transaction plus what the filesystem must do when it ends — hand the inodes it wrote to the
cache, drop the cached extent maps it changed, keep or roll back a block of inode numbers.
Transactions are committed *softly* (the commit record is in the log buffer, locks released
early); the log daemon makes them durable within the commit interval, the periodic commit that
bounds what an unclean stop loses.

**The inode cache.** An operation reads each inode once (:meth:`Inodes.copy`) and changes its own
copy; :meth:`Inodes.put` logs it, and the cache takes it only when the transaction commits, so an
abort leaves the cache as it was. Writes into allocated space change only the cached inode (size,
times): such inodes are *dirty* until the flusher logs them, every half commit interval — always
after the data they describe, as ordered mode needs.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .datamap import DataMap
from .engine.alloc import NoSpace
from .engine.logmanager import LogFull
from .engine.page import PAGE_SIZE
from .errors import FsError
from .history import Barrier
from .keys import U64, Inode, ino_key
from .trees import KEY_NEXT_INO

INO_BATCH = 1024  # inode numbers reserved per record update
INO_LIMIT = 1 << 48  # the tree's inode numbers stay below: higher bits tag a subtree's inodes
CACHE_LIMIT = 65536  # cached inodes before the clean ones are forgotten


class FsTransaction:
    """One filesystem operation's transaction: the engine's transaction ``tx`` (what the trees
    and the engine are given) and the filesystem's own state of it. A plain slotted class: one
    is built per operation."""

    __slots__ = ("tx", "nodes", "extent_inos", "maps_current", "ino_block", "data_independent", "sums_recorded",
                 "durability")

    def __init__(self, tx) -> None:
        self.tx = tx
        self.nodes: dict[int, Inode] = {}  # inodes it wrote: the cache takes them at commit
        self.extent_inos: set[int] = set()  # files whose extent map it changed: their cached maps are dropped ...
        self.maps_current: set[int] = set()  # ... unless the change was made to the cached copy too (kept)
        self.ino_block: tuple[int, int] | None = None  # a block of inode numbers it reserved
        self.data_independent = False  # True: its records describe no data written before (overwrite intents)
        self.sums_recorded: set[int] = set()  # device pages whose sums it logged: newer than deferred ones
        self.durability = None  # the engine's handle on its commit record, once committed


class Inodes:
    def __init__(self, engine, trees: dict, data: DataMap) -> None:
        self.e = engine
        self.t = trees
        self.data = data
        self.lock = threading.RLock()
        self.closed = False
        self.stats = {"transactions": 0, "aborts": 0, "fsyncs": 0}
        self._cache: dict[int, Inode] = {}
        self._dirty: set[int] = set()  # cached inodes with changes not yet logged (size, times)
        self._ino_next = self._ino_limit = 0  # the block of inode numbers being handed out
        self._stop_flusher = threading.Event()
        self.barrier = Barrier()  # held shared by data changes, exclusive by a snapshot's creation

    # ----- transactions -------------------------------------------------------------------------
    def begin(self) -> FsTransaction:
        if self.closed:
            raise FsError(errno.EIO, "filesystem is closed")
        return FsTransaction(self.e.begin())

    def commit(self, ftx: FsTransaction) -> None:
        """Commit softly; the cache takes the transaction's inodes."""
        if not ftx.data_independent:
            self.data.depend()
        ftx.durability = self.e.soft_commit(ftx.tx)
        self.stats["transactions"] += 1
        self._cache.update(ftx.nodes)
        self._dirty.difference_update(ftx.nodes)
        for ino in ftx.extent_inos - ftx.maps_current:
            self.data.forget(ino)

    def abort(self, ftx: FsTransaction, ex: BaseException | None = None) -> None:
        """Roll back; the cache never saw the transaction's inodes. Engine errors that mean
        "no space" become ENOSPC."""
        self.e.abort(ftx.tx)
        self.stats["aborts"] += 1
        for ino in ftx.extent_inos:
            self.data.forget(ino)
        if ftx.ino_block is not None:  # the reservation was rolled back: reserve anew next time
            self._ino_next = self._ino_limit = 0
        if isinstance(ex, NoSpace):
            raise FsError(errno.ENOSPC, str(ex)) from None
        if isinstance(ex, LogFull):
            raise FsError(errno.ENOSPC, f"log full: {ex}") from None

    @contextmanager
    def transaction(self) -> Iterator[FsTransaction]:
        """One atomic operation (the caller holds :attr:`lock`): commit at the end, abort on any
        error."""
        ftx = self.begin()
        try:
            yield ftx
        except BaseException as ex:
            self.abort(ftx, ex)
            raise
        self.commit(ftx)

    # ----- the cache ----------------------------------------------------------------------------
    def get(self, ino: int) -> Inode:
        """The cached inode (not to be changed: see :meth:`copy`)."""
        node = self._cache.get(ino)
        if node is None:
            raw = self.t["inodes"].get(ino_key(ino))
            if raw is None:
                raise FsError(errno.ENOENT, f"inode {ino} does not exist")
            node = Inode.unpack(ino, raw)
            if len(self._cache) > CACHE_LIMIT:  # forget clean inodes; dirty ones are not yet logged
                self._cache = {i: n for i, n in self._cache.items() if i in self._dirty}
            self._cache[ino] = node
        return node

    def copy(self, ino: int) -> Inode:
        """The inode, for an operation to change and :meth:`put`."""
        return Inode(**self.get(ino).__dict__)

    def attrs(self, ino: int) -> Inode:
        """A copy for the caller, with ``blocks``: the data pages a regular file holds (its
        extent map, cached) in 512-byte units, so du and st_blocks show what is allocated."""
        node = self.copy(ino)
        if node.is_reg:
            node.blocks = self.data.allocated_pages(ino) * (PAGE_SIZE // 512)
        return node

    def exists(self, ino: int) -> bool:
        """Is there a record of ``ino`` in the tree (not destroyed)?"""
        return self.t["inodes"].get(ino_key(ino)) is not None

    def put(self, ftx: FsTransaction, node: Inode) -> None:
        """Log ``node`` in ``ftx``, after the checksums of its data written so far (a size is
        never durable without the sums of the bytes below it). Nothing needs the new version
        before the commit hands it to the cache."""
        self.data.sums.log_deferred(ftx, node.ino)
        self.t["inodes"].put(ftx.tx, ino_key(node.ino), node.pack())
        ftx.nodes[node.ino] = node

    def keep_dirty(self, node: Inode) -> None:
        """A change to ``node`` kept in memory only (a write into allocated space): logged by
        the flusher, fsync, the file's next transaction or unmount."""
        self._cache[node.ino] = node
        self._dirty.add(node.ino)

    def is_dirty(self, ino: int) -> bool:
        return ino in self._dirty

    def drop(self, ino: int) -> None:
        """Forget a destroyed inode."""
        self._cache.pop(ino, None)
        self._dirty.discard(ino)

    def counts(self) -> dict:
        return {"cached_inodes": len(self._cache), "dirty_inodes": len(self._dirty)}

    # ----- inode numbers ------------------------------------------------------------------------
    def new_ino(self, ftx: FsTransaction) -> int:
        """Inode numbers are reserved in blocks of :data:`INO_BATCH`: the record moves once per
        block, not once per create. A crash skips the rest of a block; numbers are never reused."""
        if self._ino_next >= self._ino_limit:
            start = U64.unpack(self.t["meta"].get(KEY_NEXT_INO))[0]
            if start + INO_BATCH > INO_LIMIT:
                raise FsError(errno.ENOSPC, f"every inode number below {INO_LIMIT} has been used")
            self.t["meta"].put(ftx.tx, KEY_NEXT_INO, U64.pack(start + INO_BATCH))
            # the block is ours only once this transaction commits (see abort)
            ftx.ino_block = (start, start + INO_BATCH)
            self._ino_next, self._ino_limit = start, start + INO_BATCH
        ino = self._ino_next
        self._ino_next += 1
        return ino

    # ----- the flusher --------------------------------------------------------------------------
    def flush(self, unmark_all: bool = False) -> int:
        """Log the inodes whose size and times changed in memory only (writes into allocated
        space), in one transaction: after the data they describe, so ordered mode holds. The
        groups of data pages marked for overwrites that have gone idle are unmarked in it
        (``unmark_all``: every one, at a clean unmount). Returns the inodes logged."""
        with self.lock:
            marks = self.data.marks
            if self.closed or not self._dirty and not marks.due(unmark_all):
                return 0
            inos = sorted(self._dirty)
            with self.transaction() as ftx:
                for ino in inos:
                    if ino in self._cache and self.exists(ino):
                        self.put(ftx, self._cache[ino])
                marks.expire(ftx, everything=unmark_all)
            self._dirty.difference_update(inos)
            return len(inos)

    def start_flusher(self, interval: float) -> None:
        """The periodic commit of in-memory inode changes (with the log daemon's T, the bound
        on what an unclean stop loses)."""
        def run() -> None:
            while not self._stop_flusher.wait(interval):
                try:
                    self.flush()
                except Exception:  # noqa: BLE001  (closed meanwhile, or out of space: next round)
                    continue

        threading.Thread(target=run, name="inode-flusher", daemon=True).start()

    def close(self) -> None:
        """No transaction from now on (the caller holds :attr:`lock`); the flusher stops."""
        self._stop_flusher.set()
        self.closed = True

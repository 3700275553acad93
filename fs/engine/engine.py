"""The engine façade: format, open (with recovery), transactions, checkpoints, shutdown.

Device layout (one engine per device — anything that keeps the device contract,
``traxfs.volume.contract``: an image file, a block device, a logical volume)::

    [0, 8 KiB)                 superblock, two copies
    [8 KiB, 8 KiB + log_size)  the circular log
    [pages_offset, end)        pages of 4 KiB, pages_offset 1 MiB-aligned
        page 0                 the catalog: named roots of structures (slotted)
        pages 1..k             allocation bitmaps (one bit per page; ``map_pages`` = k)
        pages k+1..            data; a bitmap added by growing the engine sits at the first
                               page it covers (m * BITS_PER_MAP for map m >= k)

``update(tx, page, opcode, payload)`` is Stasis' ``Tupdate``: latch the page, append the log
record, run the operation's redo as the forward action, stamp the page LSN, mark it dirty.

**The public face** — what the structures and the filesystem use; everything else (the buffer,
the log manager, the log store, the allocator) is the engine's own:

* lifecycle: ``format``, ``open``, ``checkpoint``, ``close``, ``unclean_shutdown``;
* transactions: ``begin``, ``update``/``apply``, ``lock``, ``commit``/``soft_commit``, ``abort``,
  nested top actions (``nta_begin``/``nta_end``), savepoints (``rollback_to``), ``compensate``,
  ``active_transactions``;
* pages: ``page(pid)`` (pinned and latched; ``pin_table`` and ``pin`` for a walk in C), the catalog of named roots (``get_root``/``set_root``),
  records on pages (``records``: Stasis' ``Talloc``/``Tdealloc``), ``write_unlogged`` (bulk
  loads), ``write_back``, the engine's own pages (``engine_pages``, ``map_page``, ``nmaps``);
* space: ``alloc_region``, ``alloc_at``, ``free_region``, ``free_page`` (reusable once durable),
  ``is_allocated``, ``free_pages``, ``quarantined_pages``, ``pages_in_use``, ``page_count``, ``first_data_page``;
* raw data pages: ``raw`` (:class:`~traxfs.fs.engine.raw.RawPages`: bytes written outside the log);
* C paths of the structures: ``applier`` (``traxfs.ext.logapply.PageApplier``: ``apply`` and ``_append`` from C);
* durability: ``make_durable``, ``next_lsn``, log barriers (``add_log_barrier``);
* damage and state: ``note_damage``/``clear_damage``, ``damage``, ``crashed``, ``sb`` (the
  superblock as last written: read it, never write it), ``stats``.

The structures' operations are registered in ``traxfs.fs.engine.opcodes`` when their modules are
imported; an engine whose log may hold them is opened after that import.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from ...ext.logapply import PageApplier
from ...volume.contract import DeviceContract
from . import opcodes, slotted, undo
from .buffer import BufferManager, Frame, PinnedPage
from .locks import LockManager, X
from .logmanager import Durability, GroupCommitPolicy, LogManager
from .logrecord import NO_PAGE, RAW_CLAIM, LogRecord, RecType
from .logstore import FIRST_LSN, LogStore
from .page import PAGE_SIZE, PageType, init_header, seal, set_page_lsn
from .raw import RawPages
from .recovery import RecoveryReport, recover
from .superblock import (
    SUPER_AREA,
    Superblock,
    SuperblockError,
    read_superblock,
    write_superblock,
)
from .xact import NestedTopAction, Transaction, TransactionError, TxState

BITS_PER_MAP = (PAGE_SIZE - 32) * 8
CATALOG_PAGE = 0
_ROOT = struct.Struct("<Q")
log = logging.getLogger("traxfs.engine")


class DeviceTooSmall(SuperblockError):
    """The device is shorter than the page area its superblock describes (a truncated image)."""


def mib_text(n: int) -> str:
    """A device size for messages: whole MiB when it is one, else bytes."""
    return f"{n / (1 << 20):.0f} MiB" if n % (1 << 20) == 0 else f"{n} bytes"


def check_device_size(dev: DeviceContract, sb: Superblock, name: str) -> None:
    """Refuse a device that cannot hold the engine its superblock describes: every page past
    its end would read as an error, and writes there would fail or extend it with holes."""
    if sb.log_offset + sb.log_size > sb.pages_offset:
        raise SuperblockError(f"{name}: superblock places the log ({sb.log_offset}+{sb.log_size}) over the "
                              f"pages (at {sb.pages_offset}): damaged")
    if dev.size < sb.end:
        raise DeviceTooSmall(f"{name} is {mib_text(dev.size)} but its filesystem needs {mib_text(sb.end)}: the device or "
                             f"image was truncated or shrunk; restore its size (an image file: truncate -s {sb.end} "
                             f"{name}; a logical volume: trax lv extend) or recreate it")


def _log_buffer_factory(kind: str):
    from ...ext import logbuffer

    return {"cd": logbuffer.ConsolidatedLogBuffer, "mutex": logbuffer.MutexLogBuffer}[kind]


def _new_page_seed(dev: DeviceContract, name: str) -> int:
    """A page seed for a new format: random, never 0 (unseeded), and never the seed of the
    engine being formatted over, if the device holds one: its pages must not pass for ours."""
    try:
        old = read_superblock(dev, name).page_seed
    except SuperblockError:
        old = 0
    while True:
        seed = int.from_bytes(os.urandom(4), "little")
        if seed not in (0, old):
            return seed


class Engine:
    # ----- creating and opening -----------------------------------------------------------------
    @staticmethod
    def format(dev: DeviceContract, *, log_size: int = 64 << 20, name: str = "engine") -> Superblock:
        """Lay out an empty engine on ``dev`` (not logged: nothing else is on it yet)."""
        log_size -= log_size % 4096
        pages_offset = -(-(SUPER_AREA + log_size) // (1 << 20)) * (1 << 20)
        page_count = (dev.size - pages_offset) // PAGE_SIZE
        nmaps = -(-page_count // BITS_PER_MAP)
        if page_count < nmaps + 16:
            raise ValueError(f"{name}: device of {dev.size} bytes is too small for a {log_size}-byte log")
        seed = _new_page_seed(dev, name)
        buf = bytearray(PAGE_SIZE)
        init_header(buf, CATALOG_PAGE, PageType.SLOTTED)
        slotted.format_slotted(buf)
        seal(buf, CATALOG_PAGE, seed)
        dev.write(pages_offset, buf)
        for m in range(nmaps):  # the catalog and the maps themselves are allocated
            init_header(buf, 1 + m, PageType.ALLOC_MAP)
            first = m * BITS_PER_MAP
            for pid in range(first, min(first + BITS_PER_MAP, nmaps + 1)):
                buf[32 + (pid - first) // 8] |= 1 << (pid % 8)
            seal(buf, 1 + m, seed)
            dev.write(pages_offset + (1 + m) * PAGE_SIZE, buf)
        # write the whole log region once: later log writes then overwrite allocated blocks, so
        # each commit's fdatasync carries no block-allocation metadata (as with a zero-filled WAL)
        zeros = bytes(1 << 20)
        for off in range(SUPER_AREA, SUPER_AREA + log_size, len(zeros)):
            dev.write(off, zeros[: min(len(zeros), SUPER_AREA + log_size - off)])
        sb = Superblock(PAGE_SIZE, SUPER_AREA, log_size, pages_offset, page_count, FIRST_LSN, FIRST_LSN,
                        epoch=0, seq=0, log_id=int.from_bytes(os.urandom(4), "little"), map_pages=nmaps,
                        page_seed=seed)
        sb = write_superblock(dev, sb)
        return write_superblock(dev, sb)  # both copies valid from the start

    def __init__(self, dev: DeviceContract, sb: Superblock, *, name: str, buffer_pages: int,
                 policy: GroupCommitPolicy | None, log_buffer: str):
        self.dev, self.sb, self.name = dev, sb, name
        self.store = LogStore(dev, sb.log_offset, sb.log_size, sb.log_id)
        self.page_seed = sb.page_seed  # every page's checksum is seeded with it (see Superblock)
        self.buffer = BufferManager(dev, sb.pages_offset, sb.page_count, self._force_log, capacity=buffer_pages,
                                    page_seed=sb.page_seed)
        # ``with engine.page(pid) as frame``: pin and latch a page for reading (or for a sequence
        # of updates that must be atomic). A partial, not a method: a B+tree lookup makes several
        self.page: Callable[[int], PinnedPage] = partial(PinnedPage, self.buffer)
        # the same access for a walk in C (``traxfs.ext.nodesearch.descend``): the buffer's pin
        # table for resident pages, and its pin (which loads) for the others
        self.pin_table = self.buffer.pins
        self.pin: Callable[[int], Frame] = self.buffer.pin
        self.raw = RawPages(dev, sb.pages_offset, sb.page_count, self._claim_raw, name)
        self.locks = LockManager()
        self.log: LogManager | None = None
        self._policy, self._log_buffer = policy, log_buffer
        self._xacts: dict[int, Transaction] = {}
        self._xact_lock = threading.Lock()
        self._max_xid = 0
        self._ckpt_lock = threading.Lock()
        self._ckpt_requested = threading.Event()
        self._catalog_lock = threading.Lock()
        self._sb_lock = threading.Lock()  # superblock writes: checkpoints, epochs, damage records
        self.nmaps = -(-sb.page_count // BITS_PER_MAP)
        self.map_pages = sb.map_pages or self.nmaps  # version 1 superblocks: every map contiguous
        self.damage: dict[int, str] = {}  # damaged pages met since open (``note_damage``)
        self.crashed = bool(sb.in_use)  # the last stop was not a clean close (version 1: unknown, False)
        self.closed = False
        self.checkpoint_error: str | None = None
        self.recovery = RecoveryReport()
        from .alloc import Allocator
        from .record_store import RecordAllocator

        self.alloc = Allocator(self)
        self.records = RecordAllocator(self)  # Talloc / Tdealloc (traxfs.fs.engine.record_store)

    @classmethod
    def open(cls, dev: DeviceContract, *, name: str = "engine", buffer_pages: int = 4096,
             policy: GroupCommitPolicy | None = None, log_buffer: str = "mutex", record_damage: bool = True) -> Engine:
        """Open an engine, running recovery (analysis, redo, undo) and a checkpoint.

        The operations of every structure the log may hold must be registered first (their
        modules imported): recovery refuses a record whose opcode nobody registered, before it
        changes anything. ``record_damage=False``: a page found damaged from here on is an error
        to the reader only, not recorded in the superblock (a look before a mount; fsck)."""
        sb = read_superblock(dev, name)
        check_device_size(dev, sb, name)
        eng = cls(dev, sb, name=name, buffer_pages=buffer_pages, policy=policy, log_buffer=log_buffer)
        found = recover(eng.store, eng.buffer, sb, name)
        eng._start_log(found.end_lsn, found.max_xid)
        found.report.undone = eng._undo_losers(found.losers)
        eng.checkpoint()
        eng.recovery = found.report
        if record_damage:
            # from here on a page that fails verification is damage, not a torn write redo repairs
            eng.buffer.on_corrupt = eng.note_damage
        eng._checkpointer = threading.Thread(target=eng._checkpoint_loop, name="checkpointer", daemon=True)
        eng._checkpointer.start()
        return eng

    def _undo_losers(self, losers: list[Transaction]) -> int:
        """Recovery's undo: log an ABORT for each loser that had none, roll them all back (one
        backward sweep), log each one's END. Returns the records undone."""
        for tx in losers:
            if tx.state is TxState.ACTIVE:
                self._append(tx, RecType.ABORT, new_state=TxState.ABORTING)
        self.log.flush_all()  # undo reads each chain back from the log
        undone = undo.undo_all(self, losers, lambda tx: self._append(tx, RecType.END))
        self.log.flush_all()
        return undone

    def _start_log(self, end_lsn: int, max_xid: int) -> None:
        """Once recovery found the log's end: new epoch, then the log manager."""
        self._write_sb(epoch=self.sb.epoch + 1, in_use=1)
        self.log = LogManager(self.store, end_lsn, self.sb.epoch, _log_buffer_factory(self._log_buffer),
                              policy=self._policy, on_pressure=self._ckpt_requested.set)
        self.log.trunc_lsn = self.sb.trunc_lsn
        self._max_xid = max_xid
        # the C page applier; ``applier`` is public for the structures' own C paths
        # (``traxfs.ext.treeleaf``), which log through it without a Python call
        self.applier = PageApplier(self.log.appender, self.buffer.pins, self.buffer.pin, opcodes.REGISTRY,
                                   opcodes.lookup, self._first_change, TxState.ACTIVE)
        self._append, self.apply, self.update = self.applier.append, self.applier.apply, self.applier.update

    def _write_sb(self, **changes) -> None:
        with self._sb_lock:
            self.sb = write_superblock(self.dev, replace(self.sb, **changes))

    # ----- layout and damage --------------------------------------------------------------------
    def map_page(self, m: int) -> int:
        """The page holding allocation map ``m`` (the bits of pages m*BITS_PER_MAP ...)."""
        return 1 + m if m < self.map_pages else m * BITS_PER_MAP

    def engine_pages(self) -> list[int]:
        """The catalog and every allocation map: pages the engine itself owns."""
        return [CATALOG_PAGE] + [self.map_page(m) for m in range(self.nmaps)]

    def note_damage(self, pid: int, problem: str) -> None:
        """A page failed verification while the engine was in use: keep it in the superblock
        (``errors``, ``error_page``) so that the next mount refuses the filesystem and points
        at fsck instead of serving errors, as ext4's error state does."""
        if pid in self.damage:  # each read of it fails again: record it once
            return
        self.damage[pid] = problem
        log.error("%s: %s; unmount and run 'trax fsck --repair %s'", self.name, problem, self.name)
        if self.closed:
            return
        try:
            with self._sb_lock:
                first = self.sb.error_page if self.sb.errors else pid
                self.sb = write_superblock(self.dev, replace(self.sb, errors=min(self.sb.errors + 1, 0xFFFFFFFF),
                                                             error_page=first))
        except Exception:  # noqa: BLE001  (the device may be failing too: the log line stays)
            log.exception("%s: could not record the damage in the superblock", self.name)

    def clear_damage(self) -> None:
        """fsck repaired everything: the filesystem is no longer marked damaged."""
        self.damage.clear()
        self._write_sb(errors=0, error_page=0)

    def _force_log(self, lsn: int) -> None:
        if self.log is not None:
            self.log.force(lsn)

    @property
    def page_count(self) -> int:
        """Pages in the page area (the catalog and the maps included)."""
        return self.sb.page_count

    @property
    def first_data_page(self) -> int:
        """The first page after the catalog and the allocation maps laid out at format."""
        return self.alloc.first_data

    # ----- durability ---------------------------------------------------------------------------
    def make_durable(self, upto: int | None = None) -> None:
        """Return once every record appended so far (or up to LSN ``upto``) is on disk; raises
        :class:`~traxfs.fs.engine.logmanager.LogClosed` if the engine stopped first."""
        self.log.force(self.log.reserved() if upto is None else upto)

    def next_lsn(self) -> int:
        """The LSN the next log record will get: newer than every record so far (the page LSN
        of pages written outside the log, ``write_unlogged``)."""
        return self.log.reserved()

    def add_log_barrier(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` before every log write, after the records to write are chosen: whoever
        writes bytes outside the log that its records describe (file data) makes them durable
        there. Every barrier added runs."""
        self.log.add_barrier(fn)

    def remove_log_barrier(self, fn: Callable[[], None]) -> None:
        self.log.remove_barrier(fn)

    def log_record(self, lsn: int) -> LogRecord:
        """Read back the record at ``lsn`` (on an undo chain; durable: ``make_durable`` first)."""
        return self.store.read_record(lsn)

    # ----- transactions -------------------------------------------------------------------------
    def begin(self) -> Transaction:
        self._check_open()
        with self._xact_lock:
            self._max_xid += 1
            tx = Transaction(self._max_xid)
            self._xacts[tx.xid] = tx
        return tx

    # ``_append``, ``apply`` and ``update`` are methods of the C page applier
    # (``traxfs.ext.logapply.PageApplier``), bound when the log starts (``_start_log``):
    #
    # ``_append(tx, rtype, page=NO_PAGE, opcode=0, undo_next=0, payload=b"", new_state=None)
    # -> (lsn, end)``: append a record of ``tx``. The row update (first/last LSN, state) is atomic
    # with the append as far as checkpoints can see (both under ``tx.latch``): a checkpoint that
    # snapshots ``tx`` either precedes the record or sees the row updated — never a COMMIT in the
    # log with "active" in the row.
    #
    # ``apply(tx, pid, opcode, payload, rtype=RecType.UPDATE, undo_next=0, fresh=False) -> lsn``:
    # log and perform one page operation (Stasis' Tupdate). The redo runs on a copy of the page
    # first (an operation that refuses its arguments changes and logs nothing); a page not yet
    # dirty is marked so, and its image logged (``_first_change``), before the record; then the
    # record, the copy installed, the page LSN stamped. ``fresh``: the operation rewrites a page
    # just allocated, whose old bytes do not matter and need not be a valid page (space freed by
    # file data holds raw bytes): not read.
    #
    # ``update(tx, pid, opcode, payload, fresh=False) -> lsn``: ``apply`` by an active transaction.
    _append: Callable[..., tuple[int, int]]
    apply: Callable[..., int]
    update: Callable[..., int]

    def _first_change(self, f: Frame) -> None:
        """Before the first record that changes a clean page: mark it dirty *before* any record
        for it exists, with a recLSN no later than that record (a checkpoint's dirty page table
        can never miss the page), and log its image."""
        self.buffer.mark_dirty(f, self.log.reserved())
        self._log_page_image(f)

    def _log_page_image(self, f: Frame) -> None:
        """Full-page write protection: before the first change to a page since it was last
        written, log its whole image. If the next write of the page tears (power loss mid-write),
        redo rebuilds it from this image instead of from the damaged page."""
        image = bytes(f.data).rstrip(b"\0")
        _, end = self.log.append(RecType.PAGE_IMAGE, page=f.pid, payload=image)
        set_page_lsn(f.data, end)

    def _claim_raw(self, first: int, count: int) -> None:
        """``raw.claim``: pages ``first .. first+count-1`` (just allocated) are about to receive
        raw bytes written outside the log. Their frames are dropped, and a RAW_CLAIM record tells
        redo to drop what it rebuilt of them from older records: otherwise a crash could write a
        freed structure page back over file data (the problem ext3's revoke records solve)."""
        self.buffer.discard_range(first, count)
        self.log.append(RecType.RAW_CLAIM, payload=RAW_CLAIM.pack(first, count))

    def write_unlogged(self, first: int, images: bytes | bytearray) -> None:
        """Stasis' logging opt-out for bulk loads: write whole page images (built in memory with
        page LSN :meth:`next_lsn`; sealed here) straight to pages ``first ..`` that the caller's
        transaction has just allocated, and make them durable. Only the allocation and the
        records that make the pages reachable are logged; if the transaction aborts or never
        commits, the allocation is undone and the bytes are garbage in free space. The page LSN,
        newer than any record of the pages' previous lives, keeps redo from replaying those."""
        if len(images) % PAGE_SIZE:
            raise ValueError(f"{self.name}: unlogged images of {len(images)} bytes are not whole pages")
        pages = bytearray(images)
        for i in range(len(pages) // PAGE_SIZE):
            seal(memoryview(pages)[i * PAGE_SIZE : (i + 1) * PAGE_SIZE], first + i, self.page_seed)
        self.buffer.discard_range(first, len(pages) // PAGE_SIZE)
        self.raw.write(first * PAGE_SIZE, bytes(pages))
        self.raw.flush()  # durable before anything logged refers to them

    def write_back(self) -> None:
        """Write every dirty page to the device: a reader of the device then sees them all."""
        self.buffer.write_back()

    def nta_begin(self, tx: Transaction) -> NestedTopAction:
        tx.require_active()
        return NestedTopAction(tx, tx.last_lsn)

    def nta_end(self, nta: NestedTopAction, undo_opcode: int = 0, undo_payload: bytes = b"") -> None:
        """Close a nested top action: its physical records will never be undone; if the
        transaction aborts, the logical undo ``undo_opcode(undo_payload)`` runs instead."""
        tx = nta.tx
        if undo_opcode:
            opcodes.lookup(undo_opcode)
            self._append(tx, RecType.LOGICAL, NO_PAGE, undo_opcode, nta.start_lsn, undo_payload)
        else:
            self.compensate(tx, nta.start_lsn)

    def compensate(self, tx: Transaction, undo_next: int) -> None:
        """Append a compensation record to ``tx``'s chain: an undo of ``tx`` continues at
        ``undo_next``, skipping what lies between (a nested top action, or an inverse already run)."""
        self._append(tx, RecType.DUMMY_CLR, undo_next=undo_next)

    def lock(self, tx: Transaction, key, mode: str = X) -> None:
        tx.require_active()
        tx.depends_lsn = max(tx.depends_lsn, self.locks.lock(tx.xid, key, mode))

    def commit(self, tx: Transaction, durable: bool = True) -> Durability:
        """Commit. With ``durable`` (the default) return once the commit record is on disk;
        otherwise (soft commit) return at once with a handle to wait on. Locks are released as
        soon as the commit record is in the log buffer (early lock release)."""
        tx.require_active()
        for hook in tx.pre_commit:
            hook(tx)
        if tx.first_lsn == 0:  # read-only: nothing to log, but ELR condition 1 still holds
            self._end(tx, TxState.ENDED)
            self.locks.release_all(tx.xid)
            handle = Durability(self.log, tx.depends_lsn)
        else:
            _, end = self._append(tx, RecType.COMMIT, new_state=TxState.COMMITTED)
            self.locks.release_all(tx.xid, end)  # ELR: before the commit is durable
            handle = self.log.commit_handle(max(end, tx.depends_lsn), will_wait=durable)
            self._end(tx, TxState.ENDED)  # a COMMIT record ends a transaction: no END record
        for hook in tx.post_commit:
            hook(handle)
        if durable:
            handle.wait()
        return handle

    def soft_commit(self, tx: Transaction) -> Durability:
        return self.commit(tx, durable=False)

    def abort(self, tx: Transaction) -> None:
        """Roll back every change of ``tx`` (writing CLRs), then end it."""
        if tx.state not in (TxState.ACTIVE, TxState.ABORTING):
            raise TransactionError(f"transaction {tx.xid} is {tx.state.value}; it cannot abort")
        if tx.first_lsn:
            self._append(tx, RecType.ABORT, new_state=TxState.ABORTING)
            self.log.flush_all()  # the undo chain is read back from the log
            undo.rollback(self, tx)
            self._append(tx, RecType.END)
        for hook in tx.on_abort:
            hook(tx)
        self._end(tx, TxState.ENDED)
        self.locks.release_all(tx.xid)

    def rollback_to(self, tx: Transaction, lsn: int) -> None:
        """Undo ``tx``'s changes logged after ``lsn`` (a savepoint: ``tx.last_lsn`` when it was
        taken), writing CLRs as an abort does; ``tx`` goes on in the state it is in."""
        state = tx.state
        self.log.flush_all()  # the undo chain is read back from the log
        undo.rollback(self, tx, stop_lsn=lsn)
        tx.state = state  # the undo of a logical record leaves the transaction ABORTING

    def _end(self, tx: Transaction, state: TxState) -> None:
        tx.state = state
        with self._xact_lock:
            self._xacts.pop(tx.xid, None)

    def active_transactions(self) -> list[Transaction]:
        with self._xact_lock:
            return list(self._xacts.values())

    # ----- space --------------------------------------------------------------------------------
    def alloc_region(self, tx: Transaction, count: int, align: int = 1) -> int:
        """Allocate ``count`` contiguous pages whose first is a multiple of ``align``; returns it
        (:class:`~traxfs.fs.engine.alloc.NoSpace` if there is no such run)."""
        return self.alloc.alloc_region(tx, count, align)

    def alloc_at(self, tx: Transaction, first: int, count: int) -> bool:
        """Allocate exactly pages ``first .. first+count-1`` if all are free; False (nothing
        changed) otherwise."""
        return self.alloc.alloc_at(tx, first, count)

    def free_region(self, tx: Transaction, first: int, count: int) -> None:
        """Free pages when ``tx`` commits (reusable once that commit is durable)."""
        self.alloc.free_region(tx, first, count)

    def free_page(self, tx: Transaction, pid: int) -> None:
        self.alloc.free_page(tx, pid)

    def is_allocated(self, pid: int) -> bool:
        return self.alloc.is_allocated(pid)

    def free_pages(self) -> int:
        """Pages free in the allocation maps."""
        return self.alloc.free_count()

    def quarantined_pages(self) -> int:
        """Pages freed whose release waits for the freeing commit to be durable."""
        return self.alloc.quarantined_pages()

    def pages_in_use(self) -> list[int]:
        """Every allocated page, ascending, from the allocation maps read through the buffer
        (a map page whose copy is damaged is served from a good one of a mirror)."""
        return self.alloc.allocated()

    # ----- catalog: named roots -----------------------------------------------------------------
    def get_root(self, name: str) -> int | None:
        key = name.encode() + b"\0"
        with self.page(CATALOG_PAGE) as f:
            for rec in slotted.records(f.data):
                if rec.startswith(key):
                    return _ROOT.unpack_from(rec, len(key))[0]
        return None

    def set_root(self, tx: Transaction, name: str, value: int) -> None:
        """Name a root. Slot operations shift indices, so the catalog page is locked until
        ``tx`` ends: positional undo is only safe on a page no one else changed meanwhile."""
        self.lock(tx, ("catalog",))
        key = name.encode() + b"\0"
        body = key + _ROOT.pack(value)
        with self._catalog_lock, self.page(CATALOG_PAGE) as f:
            for i, rec in enumerate(slotted.records(f.data)):
                if rec.startswith(key):
                    self.update(tx, CATALOG_PAGE, opcodes.OP_SLOT_REPLACE, opcodes.slot_replace_payload(i, rec, body))
                    return
            self.update(tx, CATALOG_PAGE, opcodes.OP_SLOT_INSERT,
                        opcodes.slot_insert_payload(slotted.count(f.data), body))

    # ----- checkpoints and shutdown -------------------------------------------------------------
    def checkpoint(self, full: bool = True) -> int:
        """Fuzzy checkpoint: write back dirty pages, log the tables, move the truncation point.

        ``full`` writes back every dirty page (shutdown, explicit requests). The background
        checkpoint under log pressure writes back only the pages first dirtied before the newest
        eighth of the log region — enough to let truncation free the rest — because every page
        written costs a full-page image in the log at its next change."""
        with self._ckpt_lock:
            self._ckpt_requested.clear()
            older = None
            if not full:
                older = self.log.reserved() - self.store.size // 8
            self.buffer.write_back(older_than=older)
            begin, _ = self.log.append(RecType.BEGIN_CHECKPOINT, system=True)
            txs = {}
            for t in self.active_transactions():  # whoever is not listed starts after `begin`
                with t.latch:
                    if t.first_lsn and t.state is not TxState.ENDED:  # ended: its END is logged
                        txs[t.xid] = [t.first_lsn, t.last_lsn, t.state.value]
            dpt = self.buffer.dirty_page_table()
            with self._xact_lock:
                max_xid = self._max_xid
            payload = json.dumps({"xacts": txs, "dpt": dpt, "max_xid": max_xid}).encode()
            _, end = self.log.append(RecType.CHECKPOINT, payload=payload, system=True)
            self.log.force(end)
            trunc = min([begin] + [v[0] for v in txs.values()] + list(dpt.values()))
            self._write_sb(checkpoint_lsn=begin, trunc_lsn=trunc)
            self.log.trunc_lsn = trunc
            self.locks.prune(self.log.durable_lsn)
            return begin

    def _checkpoint_loop(self) -> None:
        while not self.closed:
            if self._ckpt_requested.wait(0.5) and not self.closed:
                try:
                    self.checkpoint(full=False)
                    self.checkpoint_error = None
                except Exception as e:  # kept for status; the next request retries
                    self.checkpoint_error = f"{type(e).__name__}: {e}"
                    self._ckpt_requested.clear()

    def _check_open(self) -> None:
        if self.closed:
            raise TransactionError(f"{self.name}: engine is closed")

    def close(self) -> None:
        """Clean shutdown: every active transaction must have ended; checkpoint; stop."""
        if self.closed:
            return
        active = self.active_transactions()
        if active:
            raise TransactionError(f"{self.name}: {len(active)} transaction(s) still active")
        self.checkpoint()
        self.closed = True
        self._ckpt_requested.set()
        self.log.close(flush=True)
        self._write_sb(in_use=0)  # flushes the device too

    def unclean_shutdown(self) -> None:
        """Simulate a crash (Stasis' TuncleanShutdown): stop without writing anything more.
        What the log daemon had not flushed and the buffer had not written is lost."""
        self.closed = True
        self._ckpt_requested.set()
        self.log.close(flush=False)
        self.buffer.drop_all()

    def stats(self) -> dict:
        return {"log": {**self.log.stats, "durable_lsn": self.log.durable_lsn, "trunc_lsn": self.log.trunc_lsn,
                        "reserved_lsn": self.log.reserved(), "flush_path": self.store.flush_path()},
                "buffer": {**self.buffer.stats, "resident": self.buffer.resident(),
                           "dirty": len(self.buffer.dirty_page_table())},
                "locks": dict(self.locks.stats), "active_transactions": len(self.active_transactions())}

"""ARIES recovery, its first two passes: analysis, and redo that repeats history.

* **Analysis** scans from the last checkpoint's begin record, rebuilding the transaction table
  (who committed, who was active) and the dirty page table (the first LSN that may not be on a
  page).
* **Redo** repeats history for every transaction: from the smallest recLSN, each UPDATE or CLR
  whose page is in the dirty page table is applied if the page's LSN shows it is not there yet.
  Pages end up *coherent* (no torn state) but may hold losers' changes.

Neither pass writes to the log: :func:`recover` returns what the engine needs to go on — where
the log ends, the largest transaction id seen, the losers (transactions neither committed nor
ended) — and the engine starts its log there and rolls the losers back (``traxfs.fs.engine.undo``).

Every record whose operation recovery may have to run is checked before anything changes: an
opcode nobody registered (the structure that wrote it is not loaded) stops recovery with an
error that names the record, before a page is redone or a record appended.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from . import opcodes
from .buffer import BufferManager
from .logrecord import NO_PAGE, RAW_CLAIM, LogCorrupt, LogRecord, RecType
from .logstore import FIRST_LSN, LogStore
from .page import PageCorrupt, set_page_lsn
from .superblock import Superblock
from .xact import Transaction, TxState

_WITH_OPERATION = (RecType.UPDATE, RecType.CLR, RecType.LOGICAL)  # records that name an opcode
_ON_PAGE = (RecType.UPDATE, RecType.CLR, RecType.PAGE_IMAGE)  # records redo applies to a page


@dataclass
class RecoveryReport:
    start_lsn: int = 0
    end_lsn: int = 0
    records_scanned: int = 0
    redone: int = 0
    losers: list[int] = field(default_factory=list)
    undone: int = 0
    log_end: str = ""  # why the log ends where it does (a torn tail after a crash is normal)


@dataclass
class Recovered:
    """What analysis and redo leave for the engine: the log continues at ``end_lsn``, new
    transactions are numbered after ``max_xid``, and ``losers`` must be rolled back (state
    ACTIVE: its ABORT record is still to be written; ABORTING: it was aborting at the crash)."""

    end_lsn: int
    max_xid: int
    losers: list[Transaction]
    report: RecoveryReport


def _redo(buffer: BufferManager, rec: LogRecord, name: str) -> bool:
    if rec.type == RecType.PAGE_IMAGE:
        # a readable page newer than the image keeps its contents (it may hold unlogged bulk
        # data written after a reuse); a torn, unreadable page is rebuilt from the image
        try:
            f = buffer.pin(rec.page)
        except PageCorrupt:
            f = buffer.pin(rec.page, load=False)
            f.data[:] = bytes(len(f.data))
        try:
            with f.latch:
                if f.lsn > rec.lsn:
                    return False
                f.data[:] = rec.payload.ljust(len(f.data), b"\0")
                set_page_lsn(f.data, rec.end)
                buffer.mark_dirty(f, rec.lsn)
                return True
        finally:
            buffer.unpin(f)
    op = opcodes.for_record(rec, name)
    f = buffer.pin(rec.page)
    try:
        with f.latch:
            if f.lsn > rec.lsn:  # page LSN is the end LSN of the last record applied
                return False
            op.redo(f.data, rec.payload)
            set_page_lsn(f.data, rec.end)
            buffer.mark_dirty(f, rec.lsn)
            return True
    finally:
        buffer.unpin(f)


def _check_losers_before(store: LogStore, xacts: dict[int, list], checked_from: int, name: str) -> None:
    """Undo will run the operation of every record of every loser: check those analysis did not
    scan (a loser that began before the checkpoint) so that an unknown one stops recovery now."""
    oldest = min((first for first, _, _ in xacts.values()), default=checked_from)
    if oldest >= checked_from:
        return
    for rec in store.scan(oldest):
        if rec.lsn >= checked_from:
            break
        if rec.xid in xacts and rec.type in _WITH_OPERATION:
            opcodes.for_record(rec, name)


def recover(store: LogStore, buffer: BufferManager, sb: Superblock, name: str) -> Recovered:
    """Analysis and redo over the log in ``store`` into ``buffer``; writes no log record."""
    rep = RecoveryReport(start_lsn=sb.checkpoint_lsn)
    xacts: dict[int, list] = {}  # xid -> [first_lsn, last_lsn, state]
    dpt: dict[int, int] = {}
    ended: set[int] = set()
    max_xid, end, checkpoint_seen = 0, sb.checkpoint_lsn, False
    # ----- analysis
    for rec in store.scan(sb.checkpoint_lsn):
        rep.records_scanned += 1
        end = rec.end
        if rec.type == RecType.CHECKPOINT:
            checkpoint_seen = True
            doc = json.loads(rec.payload)
            for x, (first, last, state) in doc["xacts"].items():
                # the snapshot was taken after BEGIN_CHECKPOINT: whatever the scan has already
                # seen of a transaction (records, its COMMIT, its END) is newer than the row
                if int(x) in ended or state in ("ended", "committed"):
                    continue
                t = xacts.setdefault(int(x), [first, last, state])
                t[0] = min(t[0], first)
            for pid, rec_lsn in doc["dpt"].items():
                dpt[int(pid)] = min(dpt.get(int(pid), rec_lsn), rec_lsn)
            max_xid = max(max_xid, doc["max_xid"])
            continue
        if rec.type in _WITH_OPERATION:
            opcodes.for_record(rec, name)
        if rec.xid:
            max_xid = max(max_xid, rec.xid)
            t = xacts.setdefault(rec.xid, [rec.lsn, rec.lsn, "active"])
            t[1] = rec.lsn
            if rec.type in (RecType.COMMIT, RecType.END):  # a commit needs no END record
                del xacts[rec.xid]
                ended.add(rec.xid)
            elif rec.type == RecType.ABORT:
                t[2] = "aborting"
        if rec.type in _ON_PAGE and rec.page != NO_PAGE:
            dpt.setdefault(rec.page, rec.lsn)
    rep.log_end = store.scan_stop
    if not checkpoint_seen and sb.checkpoint_lsn != FIRST_LSN:
        raise LogCorrupt(f"{name}: the checkpoint at LSN {sb.checkpoint_lsn} the superblock names is "
                         f"missing or damaged ({store.scan_stop}); the log cannot be trusted")
    rep.end_lsn = end
    _check_losers_before(store, xacts, sb.checkpoint_lsn, name)
    # ----- redo
    if dpt:
        for rec in store.scan(min(dpt.values())):
            if rec.lsn >= end:
                break
            if rec.type in _ON_PAGE and rec.page != NO_PAGE and rec.lsn >= dpt.get(rec.page, end):
                rep.redone += _redo(buffer, rec, name)
            elif rec.type == RecType.RAW_CLAIM:
                # ext3's "revoke": these pages were reused for raw data after the records just
                # redone; the rebuilt frames must never be written over that data
                first, count = RAW_CLAIM.unpack(rec.payload)
                buffer.discard_range(first, count)
                for pid in range(first, first + count):
                    if pid in dpt:
                        dpt[pid] = rec.lsn
    losers = []
    for xid, (first, last, state) in xacts.items():
        tx = Transaction(xid, first_lsn=first, last_lsn=last)
        tx.state = TxState.ACTIVE if state == "active" else TxState.ABORTING
        losers.append(tx)
    rep.losers = sorted(xacts)
    return Recovered(end, max_xid, losers, rep)

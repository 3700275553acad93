"""ARIES recovery (Stasis §1.5): analysis, redo that repeats history, undo with CLRs.

* **Analysis** scans from the last checkpoint's begin record, rebuilding the transaction table
  (who committed, who was active) and the dirty page table (the first LSN that may not be on a
  page).
* **Redo** repeats history for every transaction: from the smallest recLSN, each UPDATE or CLR
  whose page is in the dirty page table is applied if the page's LSN shows it is not there yet.
  Pages end up *coherent* (no torn state) but may hold losers' changes.
* **Undo** rolls the losers back in one backward sweep (largest LSN first across all of them),
  writing a CLR for each undone record; a CLR's ``undo_next`` skips what is already undone, so a
  crash during recovery repeats no work. Logical undo records (closing nested top actions) run
  their structure's inverse operation as a new nested top action.

Live aborts use the same :func:`rollback` code, so the path recovery depends on runs every day.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field

from traxfs.fs.engine import opcodes
from traxfs.fs.engine.logrecord import NO_PAGE, RAW_CLAIM, LogCorrupt, LogRecord, RecType
from traxfs.fs.engine.logstore import FIRST_LSN
from traxfs.fs.engine.page import PageCorrupt, set_page_lsn
from traxfs.fs.engine.xact import Transaction, TxState


@dataclass
class RecoveryReport:
    start_lsn: int = 0
    end_lsn: int = 0
    records_scanned: int = 0
    redone: int = 0
    losers: list[int] = field(default_factory=list)
    undone: int = 0
    log_end: str = ""  # why the log ends where it does (a torn tail after a crash is normal)


def _redo(engine, rec: LogRecord) -> bool:
    if rec.type == RecType.PAGE_IMAGE:
        # a readable page newer than the image keeps its contents (it may hold unlogged bulk
        # data written after a reuse); a torn, unreadable page is rebuilt from the image
        try:
            f = engine.buffer.pin(rec.page)
        except PageCorrupt:
            f = engine.buffer.pin(rec.page, load=False)
            f.data[:] = bytes(len(f.data))
        try:
            with f.latch:
                if f.lsn > rec.lsn:
                    return False
                f.data[:] = rec.payload.ljust(len(f.data), b"\0")
                set_page_lsn(f.data, rec.end)
                engine.buffer.mark_dirty(f, rec.lsn)
                return True
        finally:
            engine.buffer.unpin(f)
    op = opcodes.lookup(rec.opcode)
    f = engine.buffer.pin(rec.page)
    try:
        with f.latch:
            if f.lsn > rec.lsn:  # page LSN is the end LSN of the last record applied
                return False
            op.redo(f.data, rec.payload)
            set_page_lsn(f.data, rec.end)
            engine.buffer.mark_dirty(f, rec.lsn)
            return True
    finally:
        engine.buffer.unpin(f)


def undo_step(engine, tx: Transaction, rec: LogRecord) -> int:
    """Undo one record of ``tx``; return the LSN of the next record to undo (0: done)."""
    if rec.type == RecType.UPDATE:
        op = opcodes.lookup(rec.opcode)
        if rec.page != NO_PAGE:
            if op.undo is None:
                raise LogCorrupt(f"record {rec.lsn}: operation {op.name} cannot be undone")
            opcode, payload = op.undo(rec.payload)
            engine.apply(tx, rec.page, opcode, payload, RecType.CLR, undo_next=rec.prev_lsn)
        return rec.prev_lsn
    if rec.type == RecType.LOGICAL:
        op = opcodes.lookup(rec.opcode)
        if op.logical_undo is None:
            raise LogCorrupt(f"record {rec.lsn}: operation {op.name} has no logical undo")
        tx.state = TxState.ACTIVE  # the inverse operation runs like any other work of tx
        op.logical_undo(engine, tx, rec.payload)
        tx.state = TxState.ABORTING
        # the inverse's records form a nested top action, closed by a CLR that also compensates
        # the logical record: a crash inside the inverse undoes its partial physical changes and
        # then finds the logical record again; after the CLR, undo skips straight past it
        engine._append(tx, RecType.DUMMY_CLR, undo_next=rec.undo_next)
        return rec.undo_next
    if rec.type in (RecType.CLR, RecType.DUMMY_CLR):
        return rec.undo_next
    return rec.prev_lsn  # ABORT, BEGIN: nothing to undo


def rollback(engine, tx: Transaction, from_lsn: int) -> int:
    """Undo ``tx`` from ``from_lsn`` back to its beginning; return records undone."""
    n, lsn = 0, from_lsn
    while lsn:
        rec = engine.store.read_record(lsn)
        if rec.xid != tx.xid:
            raise LogCorrupt(f"undo chain of transaction {tx.xid} reached record {lsn} of transaction {rec.xid}")
        lsn = undo_step(engine, tx, rec)
        n += 1
    return n


def recover(engine) -> RecoveryReport:
    sb, store = engine.sb, engine.store
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
        if rec.xid:
            max_xid = max(max_xid, rec.xid)
            t = xacts.setdefault(rec.xid, [rec.lsn, rec.lsn, "active"])
            t[1] = rec.lsn
            if rec.type in (RecType.COMMIT, RecType.END):  # a commit needs no END record
                del xacts[rec.xid]
                ended.add(rec.xid)
            elif rec.type == RecType.ABORT:
                t[2] = "aborting"
        if rec.type in (RecType.UPDATE, RecType.CLR, RecType.PAGE_IMAGE) and rec.page != NO_PAGE:
            dpt.setdefault(rec.page, rec.lsn)
    rep.log_end = store.scan_stop
    if not checkpoint_seen and sb.checkpoint_lsn != FIRST_LSN:
        raise LogCorrupt(f"{engine.name}: the checkpoint at LSN {sb.checkpoint_lsn} the superblock names is "
                         f"missing or damaged ({store.scan_stop}); the log cannot be trusted")
    rep.end_lsn = end
    # ----- redo
    if dpt:
        for rec in store.scan(min(dpt.values())):
            if rec.lsn >= end:
                break
            if rec.type in (RecType.UPDATE, RecType.CLR, RecType.PAGE_IMAGE) and rec.page != NO_PAGE \
                    and rec.lsn >= dpt.get(rec.page, end):
                rep.redone += _redo(engine, rec)
            elif rec.type == RecType.RAW_CLAIM:
                # ext3's "revoke": these pages were reused for raw data after the records just
                # redone; the rebuilt frames must never be written over that data
                first, count = RAW_CLAIM.unpack(rec.payload)
                engine.buffer.discard_range(first, count)
                for pid in range(first, first + count):
                    if pid in dpt:
                        dpt[pid] = rec.lsn
    # ----- undo (appending CLRs needs the log: new epoch from here on)
    engine._start_log(end, max_xid)
    losers: dict[int, Transaction] = {}
    for xid, (first, last, state) in xacts.items():
        tx = Transaction(xid, first_lsn=first, last_lsn=last)
        tx.state = TxState.ABORTING
        if state == "active":
            engine._append(tx, RecType.ABORT)
        losers[xid] = tx
    rep.losers = sorted(losers)
    heap = [(-tx.last_lsn, xid) for xid, tx in losers.items()]
    heapq.heapify(heap)
    engine.log.flush_all()  # undo reads each chain back from the log
    while heap:
        neg, xid = heapq.heappop(heap)
        tx = losers[xid]
        nxt = undo_step(engine, tx, engine.store.read_record(-neg))
        rep.undone += 1
        if nxt:
            heapq.heappush(heap, (-nxt, xid))
        else:
            engine._append(tx, RecType.END)
    engine.log.flush_all()
    engine.checkpoint()
    return rep

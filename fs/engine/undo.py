"""Undo: rolling a transaction's changes back, newest first, writing compensation records.

One code path for a live abort, a savepoint's rollback (``Engine.rollback_to``) and recovery's
undo of the losers, so the path recovery depends on runs every day.

Each record of the transaction's chain is undone by its operation's inverse, logged as a CLR
whose ``undo_next`` skips what is already undone, so a crash during a rollback repeats no work.
A logical record (closing a nested top action) runs its structure's inverse operation as a new
nested top action, closed by a compensation record. Recovery undoes the losers in one backward
sweep (largest LSN first across all of them), as ARIES does.

Only the engine's public calls are used here: ``apply`` (with the CLR record type),
``compensate``, and ``log_record`` to read a chain back.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from . import opcodes
from .logrecord import NO_PAGE, LogCorrupt, LogRecord, RecType
from .xact import Transaction, TxState


def undo_step(engine, tx: Transaction, rec: LogRecord) -> int:
    """Undo one record of ``tx``; return the LSN of the next record to undo (0: done)."""
    if rec.type == RecType.UPDATE:
        op = opcodes.for_record(rec, engine.name)
        if rec.page != NO_PAGE:
            if op.undo is None:
                raise LogCorrupt(f"record {rec.lsn}: operation {op.name} cannot be undone")
            opcode, payload = op.undo(rec.payload)
            engine.apply(tx, rec.page, opcode, payload, RecType.CLR, undo_next=rec.prev_lsn)
        return rec.prev_lsn
    if rec.type == RecType.LOGICAL:
        op = opcodes.for_record(rec, engine.name)
        if op.logical_undo is None:
            raise LogCorrupt(f"record {rec.lsn}: operation {op.name} has no logical undo")
        tx.state = TxState.ACTIVE  # the inverse operation runs like any other work of tx
        op.logical_undo(engine, tx, rec.payload)
        tx.state = TxState.ABORTING
        # the inverse's records form a nested top action, closed by a CLR that also compensates
        # the logical record: a crash inside the inverse undoes its partial physical changes and
        # then finds the logical record again; after the CLR, undo skips straight past it
        engine.compensate(tx, rec.undo_next)
        return rec.undo_next
    if rec.type in (RecType.CLR, RecType.DUMMY_CLR):
        return rec.undo_next
    return rec.prev_lsn  # ABORT, BEGIN: nothing to undo


def rollback(engine, tx: Transaction, stop_lsn: int = 0) -> int:
    """Undo ``tx``'s records newer than ``stop_lsn`` (0: all of them); return records undone.
    The chain is read back from the log: the caller has made it durable."""
    n, lsn = 0, tx.last_lsn
    while lsn > stop_lsn:
        rec = engine.log_record(lsn)
        if rec.xid != tx.xid:
            raise LogCorrupt(f"undo chain of transaction {tx.xid} reached record {lsn} of transaction {rec.xid}")
        lsn = undo_step(engine, tx, rec)
        n += 1
    return n


def undo_all(engine, losers: list[Transaction], finished: Callable[[Transaction], None]) -> int:
    """Recovery's undo: roll every loser back in one backward sweep, largest LSN first, calling
    ``finished(tx)`` as each is done (the engine logs its END). Returns records undone."""
    by_xid = {tx.xid: tx for tx in losers}
    heap = [(-tx.last_lsn, tx.xid) for tx in losers]
    heapq.heapify(heap)
    n = 0
    while heap:
        neg, xid = heapq.heappop(heap)
        tx = by_xid[xid]
        nxt = undo_step(engine, tx, engine.log_record(-neg))
        n += 1
        if nxt:
            heapq.heappush(heap, (-nxt, xid))
        else:
            finished(tx)
    return n

"""Checking the queue store (fsck's queue pass): the block chain, sequence continuity, the
indexes' agreement with the blocks, views and segments; and the repairs that lose nothing.

Run it on a store opened for checking (:class:`~traxfs.fs.queues.store.QueueStore` with
``background=False``; opening already finishes an interrupted queue removal and gives back an
empty last block). Per queue, in sequence order:

* **blocks**: ordinals increase; each block's ``prev_end`` is the previous block's end and its
  first sequence number is not below it (a crash may skip numbers, never reuse them); only the
  last block may be empty; its pages are allocated and no other block owns them; its bytes read
  back with every checksum and agree with the index (header, frame sequence numbers, record and
  byte counts) — a mirror's good copy repairs a damaged leg on the way;
* **reservation**: no record at or past the queue's reserved sequence numbers;
* **time index**: exactly one entry per block, keyed by its first timestamp;
* **views**: each head inside the retained history or at the live end;
* **segments**: in order, not overlapping, inside the retained history, end above first;
* **orphans**: no entry of any tree belongs to a queue id that does not exist.

Repairs (``repair=True``), each its own transaction: time entries added or dropped to match the
blocks; a head outside the history moved to its nearer end; a reservation below the records
raised; segments that overlap or lie outside the history dropped (their records stay in the
queue); orphan entries dropped and their blocks' pages freed; a lost next-id record rebuilt. A damaged block, a broken chain or
a page owned twice is reported and left alone: the records are the user's, and no repair can
bring them back. A repair changes the queue's memory with its records, so the store may be
used, or closed cleanly, afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..rawstore import owned_pages as store_pages
from ..rawstore import tree_headers
from ..struct.btree_salvage import salvage
from .block import Block, BlockDamaged
from .index import (
    DOOMED,
    KEY_NEXT_ID,
    PREFIX,
    TREES,
    U64,
    U64X2,
    BlockEntry,
    QueueRecord,
    SegmentRecord,
    ViewRecord,
    key_seq,
    queue_range,
    time_key,
    view_key,
)


@dataclass
class QueueCheck:
    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pages: set[int] = field(default_factory=set)  # engine pages the queues' blocks own
    counts: dict = field(default_factory=dict)


def check_queues(store, repair: bool = False) -> QueueCheck:
    """Check every queue of ``store``; with ``repair``, fix what can be fixed without losing
    records (see the module's text)."""
    out = QueueCheck()
    owner: dict[int, str] = {}
    records = blocks = 0
    for name in store.names():
        q = store.get(name)
        blocks_seen, n, end = _blocks(store, q, out, owner, repair)
        blocks += blocks_seen
        records += n
        live_end = max(q.live_end, end)  # (a reservation found too low left the queue's end short)
        _views(store, q, live_end, out, repair)
        _segments(store, q, live_end, out, repair)
    _orphans(store, out, repair)
    out.counts = {"queues": len(store.names()), "blocks": blocks, "records": records, "pages": len(out.pages)}
    return out


def owned_pages(engine) -> set[int]:
    """Every page the queue store owns — its trees' and its blocks' (see ``rawstore.owned_pages``)."""
    return store_pages(engine, TREES, PREFIX, (e for _, _, e in queue_blocks(engine)))


def queue_blocks(engine) -> list[tuple[int, int, BlockEntry]]:
    """(queue id, first sequence number, entry) of every block the index names, read as far as
    the index can be read, without opening the store (scrub, fsck's damage pass)."""
    header = tree_headers(engine, ("blocks",), PREFIX)["blocks"]
    if header is None:
        return []
    return [(*U64X2.unpack(k), BlockEntry.unpack(v)) for k, v in salvage(engine, header).entries]


def block_ok(qid: int, first: int, entry: BlockEntry) -> Callable[[bytes], bool]:
    """Does a copy of a block's first ``entry.used`` bytes pass every check of a read?"""
    def ok(data: bytes) -> bool:
        try:
            Block.load(qid, first, entry, data, f"queue id {qid}: block {entry.ordinal}")
        except BlockDamaged:
            return False
        return True
    return ok


def _fix(store, out: QueueCheck, repair: bool, text: str, body) -> None:
    """Report ``text``; with ``repair`` run ``body(tx)`` in a transaction and report it fixed."""
    if not repair:
        out.problems.append(text)
        return
    tx = store.io.begin()
    try:
        body(tx)
    except BaseException as ex:
        store.io.abort(tx)
        out.problems.append(f"{text} (repair failed: {ex})")
        return
    store.io.commit(tx, durable=True)
    out.repaired.append(text)


def _blocks(store, q, out: QueueCheck, owner: dict[int, str], repair: bool) -> tuple[int, int, int]:
    """(blocks, records, the end of the last block)."""
    t, qid = store.t, q.qid
    lo, hi = queue_range(qid)
    entries = [(key_seq(k), BlockEntry.unpack(v)) for k, v in t["blocks"].items(lo, hi)]
    end = prev_ordinal = None
    records = 0
    for i, (first, e) in enumerate(entries):
        where = f"{q.where}: block {e.ordinal} (sequence {first}..{first + e.count})"
        if prev_ordinal is not None and e.ordinal <= prev_ordinal:
            out.problems.append(f"{where}: ordinal after {prev_ordinal} (the chain of blocks is broken)")
        if end is not None and e.prev_end != end:
            out.problems.append(f"{where}: says the queue ended at {e.prev_end} before it, the previous block "
                                f"ends at {end} (the chain of blocks is broken)")
        if e.prev_end > first or end is not None and first < end:
            out.problems.append(f"{where}: starts below the end of what came before it (sequence numbers reused)")
        if (e.count == 0) != (e.used == 0) or e.count == 0 and i != len(entries) - 1:
            out.problems.append(f"{where}: {e.count} records in {e.used} bytes (only the last block may be empty)")
        for page in range(e.page, e.page + e.pages):
            if page in owner:
                out.problems.append(f"{where}: engine page {page} is also owned by {owner[page]}")
            owner[page] = where
            if not store.io.is_allocated(page):
                out.problems.append(f"{where}: engine page {page} is not allocated")
        out.pages.update(range(e.page, e.page + e.pages))
        if e.count:
            try:
                q.load_block(first, e)
            except BlockDamaged as ex:
                out.problems.append(f"{ex.detail}; records {first}..{first + e.count - 1} cannot be read")
        end, prev_ordinal = first + e.count, e.ordinal
        records += e.count
    if end is not None and end > q.reserved:
        def raise_reservation(tx) -> None:
            t["queues"].put(tx, q.name, QueueRecord(qid, q.created_ms, end, q.config).pack())
            q.reserved, q.live_end = end, max(q.live_end, end)
        _fix(store, out, repair, f"{q.where}: records up to {end} but sequence numbers reserved only below "
                                 f"{q.reserved} (they could be handed out again)", raise_reservation)
    _times(store, q, entries, out, repair)
    return len(entries), records, end if end is not None else q.live_end


def _times(store, q, entries: list[tuple[int, BlockEntry]], out: QueueCheck, repair: bool) -> None:
    t, qid = store.t, q.qid
    want = {time_key(qid, e.first_ts, first) for first, e in entries}
    have = set(t["times"].keys(*queue_range(qid)))
    for key in sorted(have - want):
        ts, seq = U64.unpack(key[8:16])[0], U64.unpack(key[16:])[0]
        _fix(store, out, repair, f"{q.where}: time index entry ({ts} ms, sequence {seq}) names no block",
             lambda tx, key=key: t["times"].delete(tx, key))
    for key in sorted(want - have):
        ts, seq = U64.unpack(key[8:16])[0], U64.unpack(key[16:])[0]
        _fix(store, out, repair, f"{q.where}: block at sequence {seq} is missing from the time index ({ts} ms)",
             lambda tx, key=key: t["times"].put(tx, key, b""))


def _views(store, q, live_end: int, out: QueueCheck, repair: bool) -> None:
    t = store.t
    low = q.first_seq if q.blocks else live_end
    for name, v in sorted(q.views.items()):
        if low <= v.head <= live_end:
            continue
        to = low if v.head < low else live_end
        side = "below the retained history" if v.head < low else "beyond the live end"
        new = ViewRecord(to, v.created_ms)
        _fix(store, out, repair, f"{q.where}: view {name.decode(errors='replace')!r} has its head at {v.head}, "
                                 f"{side} ({low}..{live_end}); moved to {to}",
             lambda tx, name=name, new=new: _set_head(t, q, tx, name, new))


def _set_head(t, q, tx, name: bytes, new: ViewRecord) -> None:
    t["views"].put(tx, view_key(q.qid, name), new.pack())
    q.views[name] = new


def _segments(store, q, live_end: int, out: QueueCheck, repair: bool) -> None:
    t = store.t
    low = q.first_seq if q.blocks else live_end
    end = low
    for key, raw in list(t["segments"].items(*queue_range(q.qid))):
        first, s = key_seq(key), SegmentRecord.unpack(raw)
        if first < end or s.end <= first or s.end > live_end or s.count > s.end - first:
            _fix(store, out, repair, f"{q.where}: segment {first}..{s.end} ({s.count} records) overlaps another "
                                     f"or lies outside the retained history {low}..{live_end}; dropped (its "
                                     "records stay in the queue)",
                 lambda tx, key=key: t["segments"].delete(tx, key))
            continue
        end = s.end


def _orphans(store, out: QueueCheck, repair: bool) -> None:
    """Entries of queue ids that no queue (and no unfinished removal) has."""
    t = store.t
    live = {q.qid for q in (store.get(n) for n in store.names())}
    live |= {U64.unpack(k[len(DOOMED):])[0] for k in t["queues"].keys(DOOMED, DOOMED + b"\xff")}
    for tree in ("blocks", "times", "views", "segments"):
        ids = sorted({U64.unpack(k[:8])[0] for k in t[tree].keys()} - live)
        for qid in ids:
            keys = list(t[tree].keys(*queue_range(qid)))

            def drop(tx, tree=tree, keys=keys) -> None:
                for key in keys:
                    raw = t[tree].delete(tx, key)
                    if tree == "blocks":
                        e = BlockEntry.unpack(raw)
                        store.io.free(tx, e.page, e.pages)

            _fix(store, out, repair, f"{len(keys)} {tree} entr{'y' if len(keys) == 1 else 'ies'} of queue id {qid}, "
                                     "which no queue has", drop)
            if not repair and tree == "blocks":
                for key in keys:
                    e = BlockEntry.unpack(t[tree].get(key))
                    out.pages.update(range(e.page, e.page + e.pages))
    if t["queues"].get(KEY_NEXT_ID) is None and live:
        _fix(store, out, repair, "the queue store has queues but no next queue id record (a new queue would "
                                 "reuse an id)", lambda tx: t["queues"].put(tx, KEY_NEXT_ID, U64.pack(max(live) + 1)))

"""A linked list of variable-length records over slotted pages (as in Stasis).

Stasis links records ``{item, prev, next}`` by record id. Here slot indices are not stable (a
slotted delete shifts the slots after it), so the list links *pages* instead: each page holds a
run of consecutive records in list order, pages are chained head → tail, and a record's
identity is its position. This keeps neighbours on one page (Stasis' ``TallocFromPage`` goal),
makes iteration one page read per ~page of records, and makes push/pop at either end O(1) page
touches — the list is a deque, usable as a queue (``push`` + ``pop``) or a stack.

Page formats (after the 32-byte page header)::

    header (LIST_HEADER)  magic b"TXLL", version u16, pad u16, head u64, tail u64, count u64
    node   (SLOTTED)      aux = next page (0: the tail); records in list order

Invariant: no node is empty unless the list is empty (then head = tail = one empty node). A
node emptied by pop/remove is unlinked and freed. Records are at most :data:`MAX_RECORD` bytes.

Every change is a nested top action under the list's latch, with a logical undo: push ↔ remove
the pushed record (the last equal record for a push at the back, the first for the front),
pop/remove ↔ insert the record back at its old position (clamped to the current length; "the
end" for a pop from the back). Under concurrent writers the restored *position* is approximate
— another transaction's pushes and pops shift positions — the *contents* are exact.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from ..engine import check as engine_check
from ..engine import opcodes, slotted
from ..engine.opcodes import Operation
from ..engine.page import HEADER_SIZE, PageType
from ..engine.xact import Transaction
from .common import (
    OP_SLOTS_CUT,
    U64,
    UNDO_HEAD,
    aux_of,
    claim_checked_page,
    free_page,
    lsn_of,
    nested_action,
    new_page,
    nslots,
    pinned,
    records_fit,
    run_inverse,
    run_payload,
    set_page_aux,
    structure_latch,
    undo_head,
    write_bytes,
)

KIND = "list"
MAGIC = b"TXLL"
VERSION = 1
MAX_RECORD = 2000
_HDR = struct.Struct("<4sHHQQQ")  # magic, version, pad, head, tail, count
_HEAD_OFF = HEADER_SIZE + 8
_TAIL_OFF = HEADER_SIZE + 16
_COUNT_OFF = HEADER_SIZE + 24
_END = (1 << 64) - 1  # "position: the end of the list"

OP_UNDO_PUSH = 140  # payload: undo head | front u8 | record
OP_UNDO_REMOVE = 141  # payload: undo head | position u64 | record


class LinkedList:
    def __init__(self, engine, header_pid: int):
        self.e = engine
        self.header = header_pid
        self.latch = structure_latch(engine, header_pid)
        with pinned(engine, header_pid) as f:
            magic = _HDR.unpack_from(f.data, HEADER_SIZE)[0]
            ptype = f.data[3]
        if ptype != PageType.LIST_HEADER or magic != MAGIC:
            raise ValueError(f"page {header_pid} is not a linked list header")

    @classmethod
    def create(cls, engine, tx: Transaction, name: str | None = None) -> LinkedList:
        header = new_page(engine, tx, PageType.LIST_HEADER, is_slotted=False)
        node = new_page(engine, tx, PageType.SLOTTED)
        write_bytes(engine, tx, header, HEADER_SIZE, _HDR.pack(MAGIC, VERSION, 0, node, node, 0))
        if name is not None:
            engine.set_root(tx, f"{KIND}:{name}", header)
        return cls(engine, header)

    @classmethod
    def open(cls, engine, header_pid: int) -> LinkedList:
        return cls(engine, header_pid)

    @classmethod
    def open_named(cls, engine, name: str) -> LinkedList | None:
        pid = engine.get_root(f"{KIND}:{name}")
        return cls(engine, pid) if pid else None

    # ----- header -------------------------------------------------------------------------------
    def _hdr(self) -> tuple[int, int, int]:
        """(head, tail, count)."""
        with pinned(self.e, self.header) as f:
            return struct.unpack_from("<QQQ", f.data, _HEAD_OFF)

    def _set(self, tx: Transaction, off: int, value: int) -> None:
        write_bytes(self.e, tx, self.header, off, U64.pack(value))

    def __len__(self) -> int:
        return self._hdr()[2]

    # ----- reading ------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[bytes]:
        """Records head to tail, one page per latch hold. If the page about to be left changed
        meanwhile, the walk restarts from the head and skips the records already returned
        (positions: concurrent pops at the head can then make it skip or repeat records)."""
        done = 0
        follow: tuple[int, int, int] | None = None  # (page read, its LSN then, its next)
        while True:
            with self.latch:
                pid = None
                if follow is not None:
                    with pinned(self.e, follow[0]) as f:
                        if lsn_of(f.data) == follow[1]:
                            pid, skip = follow[2], 0
                if pid is None:
                    pid, skip = self._hdr()[0], done
                    while pid:
                        with pinned(self.e, pid) as f:
                            n = nslots(f.data)
                            if skip < n:
                                break
                            skip -= n
                            pid = aux_of(f.data)
                if not pid:
                    return
                with pinned(self.e, pid) as f:
                    batch = slotted.records(f.data)[skip:]
                    follow = (pid, lsn_of(f.data), aux_of(f.data))
            yield from batch
            done += len(batch)

    def to_list(self) -> list[bytes]:
        with self.latch:
            return list(self)

    def _locate(self, pos: int, insert: bool) -> tuple[int, int, int | None]:
        """(page, index in it, previous page) of list position ``pos``. For an insert, a
        position between two pages is the end of the first (count: the end of the tail); for
        a removal it is the record at ``pos``."""
        prev, pid = None, self._hdr()[0]
        while True:
            with pinned(self.e, pid) as f:
                n, nxt = nslots(f.data), aux_of(f.data)
            if pos < n or (insert and pos == n) or not nxt:
                return pid, min(pos, n), prev
            pos -= n
            prev, pid = pid, nxt

    # ----- changing -----------------------------------------------------------------------------
    def push(self, tx: Transaction, record: bytes, front: bool = False) -> None:
        """Add ``record`` at the back (or the front)."""
        record = self._check(record)
        with nested_action(self.e, tx, self.latch) as act:
            self._insert_at(tx, 0 if front else _END, record)
            act.end(OP_UNDO_PUSH, undo_head(act, self.header) + bytes([front]) + record)

    append = push

    def pop(self, tx: Transaction, front: bool = True) -> bytes | None:
        """Remove and return the first (or last) record; None if the list is empty."""
        with nested_action(self.e, tx, self.latch) as act:
            count = self._hdr()[2]
            if count == 0:
                return None
            pos = 0 if front else count - 1
            rec = self._remove_at(tx, pos)
            act.end(OP_UNDO_REMOVE, undo_head(act, self.header) + U64.pack(0 if front else _END) + rec)
        return rec

    def remove(self, tx: Transaction, record: bytes) -> bool:
        """Remove the first record equal to ``record``; False if there is none."""
        record = bytes(record)
        with nested_action(self.e, tx, self.latch) as act:
            pos = self._find(record, last=False)
            if pos is None:
                return False
            self._remove_at(tx, pos)
            act.end(OP_UNDO_REMOVE, undo_head(act, self.header) + U64.pack(pos) + record)
        return True

    def _check(self, record: bytes) -> bytes:
        record = bytes(record)
        if len(record) > MAX_RECORD:
            raise ValueError(f"linked list record of {len(record)} bytes exceeds the limit of {MAX_RECORD}")
        return record

    def _find(self, record: bytes, last: bool) -> int | None:
        found, base = None, 0
        pid = self._hdr()[0]
        while pid:
            with pinned(self.e, pid) as f:
                recs = slotted.records(f.data)
                pid = aux_of(f.data)
            for i, r in enumerate(recs):
                if r == record:
                    found = base + i
                    if not last:
                        return found
            base += len(recs)
        return found

    def _insert_at(self, tx: Transaction, pos: int, rec: bytes) -> None:
        e = self.e
        head, tail, count = self._hdr()
        pos = min(pos, count)
        if pos == count:
            pid, idx = tail, None
        elif pos == 0:
            pid, idx = head, 0
        else:
            pid, idx, _prev = self._locate(pos, insert=True)
        with pinned(e, pid) as f:
            recs = slotted.records(f.data)
            nxt = aux_of(f.data)
        if idx is None:
            idx = len(recs)
        if records_fit(recs + [rec]):
            e.update(tx, pid, opcodes.OP_SLOT_INSERT, opcodes.slot_insert_payload(idx, rec))
        elif pid == head and idx == 0:  # full head: a new head before it
            self._set(tx, _HEAD_OFF, new_page(e, tx, PageType.SLOTTED, head, [rec]))
        else:  # split the page at idx; rec goes at its end, or starts the new page(s)
            moved = recs[idx:]
            if moved:
                e.update(tx, pid, OP_SLOTS_CUT, run_payload(idx, moved))
            if records_fit(recs[:idx] + [rec]):
                e.update(tx, pid, opcodes.OP_SLOT_INSERT, opcodes.slot_insert_payload(idx, rec))
                groups = [moved] if moved else []
            elif records_fit([rec] + moved):
                groups = [[rec] + moved]
            else:
                groups = [[rec], moved]
            first = nxt
            for g in reversed(groups):
                first = new_page(e, tx, PageType.SLOTTED, first, g)
            if groups:
                set_page_aux(e, tx, pid, first)
                if pid == tail:
                    last = first
                    while True:
                        with pinned(e, last) as f:
                            if not aux_of(f.data):
                                break
                            last = aux_of(f.data)
                    self._set(tx, _TAIL_OFF, last)
        self._set(tx, _COUNT_OFF, count + 1)

    def _remove_at(self, tx: Transaction, pos: int) -> bytes:
        e = self.e
        head, tail, count = self._hdr()
        if pos == 0:
            pid, idx, prev = head, 0, None
        else:
            with pinned(e, tail) as f:
                n = nslots(f.data)
            if pos == count - 1 and n > 1:  # the last record, and the tail stays non-empty
                pid, idx, prev = tail, n - 1, None
            else:
                pid, idx, prev = self._locate(pos, insert=False)
        with pinned(e, pid) as f:
            n, nxt = nslots(f.data), aux_of(f.data)
            if idx >= n:
                raise IndexError(f"linked list position {pos} outside 0..{count - 1}")
            rec = slotted.get(f.data, idx)
            e.update(tx, pid, opcodes.OP_SLOT_DELETE, opcodes.slot_delete_payload(idx, rec))
        if n == 1 and head != tail:  # the node is empty: unlink and free it
            if prev is None:
                self._set(tx, _HEAD_OFF, nxt)
            else:
                set_page_aux(e, tx, prev, nxt)
            if pid == tail:
                self._set(tx, _TAIL_OFF, prev)
            free_page(e, tx, pid)
        self._set(tx, _COUNT_OFF, count - 1)
        return rec

    # ----- verification -------------------------------------------------------------------------
    def check(self, pages: set | None = None) -> list[str]:
        """Header; the chain from head ends at tail; nodes are allocated slotted pages owned
        once; no empty node unless the list is; record sizes; the count."""
        probs: list[str] = []
        own = pages if pages is not None else set()
        name = f"list {self.header}"
        with self.latch:
            with pinned(self.e, self.header) as f:
                magic, version, _pad, head, tail, count = _HDR.unpack_from(f.data, HEADER_SIZE)
            own.add(self.header)
            if magic != MAGIC or version != VERSION:
                return [f"{name}: bad header (magic {magic!r}, version {version})"]
            total, pid, last, nodes = 0, head, 0, 0
            while pid:
                where = f"{name} page {pid}"
                buf = claim_checked_page(self.e, pid, own, where, probs)
                if buf is None:
                    break
                recs = slotted.records(buf)
                if not recs and (pid != head or pid != tail):
                    probs.append(f"{where}: empty node in a list of several nodes")
                if any(len(r) > MAX_RECORD for r in recs):
                    probs.append(f"{where}: record over {MAX_RECORD} bytes")
                total += len(recs)
                nodes += 1
                last, pid = pid, aux_of(buf)
            if last != tail:
                probs.append(f"{name}: chain ends at page {last}, header says tail {tail}")
            if total != count:
                probs.append(f"{name}: header counts {count} records, nodes hold {total}")
        return probs


# ----- logical undo -------------------------------------------------------------------------------
def _undo_push(engine, tx: Transaction, payload: bytes) -> None:
    header, start = UNDO_HEAD.unpack_from(payload)
    front = payload[UNDO_HEAD.size]
    rec = payload[UNDO_HEAD.size + 1 :]
    ll = LinkedList(engine, header)

    def inverse() -> None:
        pos = ll._find(rec, last=not front)
        if pos is not None:
            ll._remove_at(tx, pos)

    run_inverse(engine, tx, ll.latch, start, inverse)


def _undo_remove(engine, tx: Transaction, payload: bytes) -> None:
    header, start = UNDO_HEAD.unpack_from(payload)
    (pos,) = U64.unpack_from(payload, UNDO_HEAD.size)
    rec = payload[UNDO_HEAD.size + 8 :]
    ll = LinkedList(engine, header)
    run_inverse(engine, tx, ll.latch, start, lambda: ll._insert_at(tx, pos, rec))


opcodes.register(Operation(OP_UNDO_PUSH, "list_undo_push", logical_undo=_undo_push))
opcodes.register(Operation(OP_UNDO_REMOVE, "list_undo_remove", logical_undo=_undo_remove))


def _check_root(engine, pid: int, pages: set) -> list[str]:
    try:
        ll = LinkedList(engine, pid)
    except ValueError as ex:
        return [str(ex)]
    return ll.check(pages)


engine_check.register_checker(KIND, _check_root)

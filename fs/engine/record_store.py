"""Records: ``(page, slot)`` addresses on any page layout, and the record allocator (Stasis'
``Tread``, ``Tset``, ``TrecordSize``, ``Talloc``, ``Tdealloc``).

**One layout interface.** ``read_record``, ``record_size`` and ``set_record`` look the page's type up in
``LAYOUTS`` and work the same on

* ``SLOTTED`` pages (``traxfs.fs.engine.slotted``: variable-length records by slot index;
  ``set_record`` is an ``OP_SLOT_REPLACE`` with the record's pre- and post-image), and
* ``FIXED`` pages (records of ``aux`` bytes each, record ``i`` at byte ``32 + i·aux``, as the
  array list's data pages; ``set_record`` is an ``OP_WRITE`` of the record's bytes).

``set_record`` keeps a record's size (Stasis' ``Tset``); isolation is the caller's (take the engine's
locks), as in Stasis.

**The record allocator** keeps records of 1 to ``MAX_RECORD`` bytes in slotted pages whose slot
indices never shift, so a :class:`RecordId` stays valid for the record's life:

* a record is never removed from the slot directory: ``dealloc`` replaces it with an empty body
  (a free slot), and ``alloc`` reuses free slots with a replace, or appends a slot at the end;
* each active transaction appends to a page of its own (Stasis' per-transaction page pools): the
  undo of an append deletes the page's last slot, which no other transaction can have appended
  behind it; the page returns to the pool when the transaction ends;
* freed space is never reused while the freeing transaction could still roll back: ``dealloc``
  empties the slot just before the commit record (a pre-commit hook) and the slot becomes
  reusable only once that record is in the log — any later reuse is logged after it, so a crash
  can never keep the reuse and lose the free;
* a reused slot whose transaction aborts is emptied again by the undo and goes back to the list.

Free slots are remembered in memory: after a restart, slots freed earlier are not reused (their
bytes are reclaimed by page compaction; the directory entry, 4 bytes, stays), and allocation
starts new pages. A slot holding zero bytes is free, so ``read_record`` of it is an error.
"""

from __future__ import annotations

import threading
from itertools import islice
from typing import NamedTuple

from . import opcodes, slotted
from .page import HEADER_SIZE, PAGE_SIZE, PageType, get_aux
from .xact import Transaction

MAX_RECORD = slotted.MAX_RECORD
FREE_PAGES_TRIED = 8


class RecordId(NamedTuple):
    page: int
    slot: int
    size: int


class RecordError(ValueError):
    """The address names no record (wrong page type, slot out of range, a free slot) or the
    operation does not fit it (``set_record`` with another size)."""


class _Slotted:
    @staticmethod
    def locate(buf, slot: int) -> None:
        n = slotted.count(buf)
        if not 0 <= slot < n:
            raise RecordError(f"slot {slot} outside the page's {n} slots")

    @staticmethod
    def read(buf, slot: int) -> bytes:
        return slotted.get(buf, slot)

    @staticmethod
    def set_op(buf, slot: int, new: bytes) -> tuple[int, bytes]:
        return opcodes.OP_SLOT_REPLACE, opcodes.slot_replace_payload(slot, slotted.get(buf, slot), new)


class _Fixed:
    @staticmethod
    def locate(buf, slot: int) -> None:
        size = get_aux(buf)
        per_page = (PAGE_SIZE - HEADER_SIZE) // size if size else 0
        if not 0 <= slot < per_page:
            raise RecordError(f"slot {slot} outside the page's {per_page} records of {size} bytes")

    @staticmethod
    def read(buf, slot: int) -> bytes:
        size = get_aux(buf)
        at = HEADER_SIZE + slot * size
        return bytes(buf[at : at + size])

    @staticmethod
    def set_op(buf, slot: int, new: bytes) -> tuple[int, bytes]:
        size = get_aux(buf)
        at = HEADER_SIZE + slot * size
        return opcodes.OP_WRITE, opcodes.write_payload(at, bytes(buf[at : at + size]), new)


LAYOUTS = {PageType.SLOTTED: _Slotted, PageType.FIXED: _Fixed}


def _layout(buf, pid: int, slot: int):
    layout = LAYOUTS.get(buf[3])
    if layout is None:
        raise RecordError(f"page {pid} has type {buf[3]}, which holds no addressable records")
    layout.locate(buf, slot)
    return layout


def read_record(engine, rid: RecordId) -> bytes:
    """``Tread``: the record's bytes."""
    with engine.page(rid.page) as f:
        data = _layout(f.data, rid.page, rid.slot).read(f.data, rid.slot)
    if not data:
        raise RecordError(f"record {tuple(rid)} is free")
    return data


def record_size(engine, rid: RecordId) -> int:
    """``TrecordSize``: the record's size as stored (0: a free slot)."""
    with engine.page(rid.page) as f:
        return len(_layout(f.data, rid.page, rid.slot).read(f.data, rid.slot))


def set_record(engine, tx: Transaction, rid: RecordId, data: bytes) -> None:
    """``Tset``: overwrite the record (same size), logged with its pre- and post-image."""
    data = bytes(data)
    with engine.page(rid.page) as f:
        layout = _layout(f.data, rid.page, rid.slot)
        old = layout.read(f.data, rid.slot)
        if not old:
            raise RecordError(f"record {tuple(rid)} is free")
        if len(old) != len(data):
            raise RecordError(f"record {tuple(rid)} holds {len(old)} bytes; set_record gives {len(data)} (sizes are fixed)")
        if old != data:
            engine.update(tx, rid.page, *layout.set_op(f.data, rid.slot, data))


class RecordAllocator:
    """``Talloc`` / ``Tdealloc`` (see the module docstring). One per engine (``engine.records``)."""

    def __init__(self, engine):
        self.e = engine
        self._lock = threading.Lock()
        self._own: dict[int, int] = {}  # xid -> the page it appends to
        self._pool: list[int] = []  # pages with room that no active transaction appends to
        self._free: dict[int, list[int]] = {}  # page -> free slots (freed by committed transactions)
        self._reused: dict[int, list[tuple[int, int]]] = {}  # xid -> free slots it filled
        self._new: dict[int, set[int]] = {}  # xid -> record pages it allocated (freed if it aborts)
        self._freeing: dict[int, list[RecordId]] = {}  # xid -> records it frees at commit

    def _join(self, tx: Transaction) -> None:
        """First call for ``tx``: its end hands its page back (commit) or forgets it (abort)."""
        if tx.xid in self._new:
            return
        self._new[tx.xid] = set()
        tx.post_commit.append(lambda handle, xid=tx.xid: self._ended(xid, committed=True))
        tx.on_abort.append(lambda t: self._ended(t.xid, committed=False))

    def alloc(self, tx: Transaction, size: int, data: bytes | None = None) -> RecordId:
        """``Talloc``: a new record of ``size`` bytes (``data``, or zeros), logged in ``tx``."""
        body = bytes(size) if data is None else bytes(data)
        if not 1 <= size <= MAX_RECORD or len(body) != size:
            raise RecordError(f"record of {size} bytes (data {len(body)}): must be 1..{MAX_RECORD} bytes")
        tx.require_active()
        e = self.e
        with self._lock:
            self._join(tx)
            # a free slot on a page with room for the body; a few pages are tried, not all (those
            # without room go to the back), so an allocation costs the same however many pages
            # hold free slots too small for it
            for pid, slots in list(islice(self._free.items(), FREE_PAGES_TRIED)):
                with e.page(pid) as f:
                    if slotted.free_space(f.data) >= size:
                        slot = slots.pop()
                        if not slots:
                            del self._free[pid]
                        e.update(tx, pid, opcodes.OP_SLOT_REPLACE, opcodes.slot_replace_payload(slot, b"", body))
                        self._reused.setdefault(tx.xid, []).append((pid, slot))
                        return RecordId(pid, slot, size)
                self._free[pid] = self._free.pop(pid)  # no room here: to the back of the queue
            pid = self._own.get(tx.xid)
            while True:
                if pid is not None:
                    with e.page(pid) as f:
                        if slotted.fits(f.data, size):
                            slot = slotted.count(f.data)
                            e.update(tx, pid, opcodes.OP_SLOT_INSERT, opcodes.slot_insert_payload(slot, body))
                            self._own[tx.xid] = pid
                            return RecordId(pid, slot, size)
                if self._pool:
                    pid = self._pool.pop()
                else:
                    pid = e.alloc.alloc_page(tx, PageType.SLOTTED, 0, _EMPTY_SLOTTED_BODY)
                    self._new[tx.xid].add(pid)

    def dealloc(self, tx: Transaction, rid: RecordId) -> None:
        """``Tdealloc``: free the record when ``tx`` commits (it stays readable until then)."""
        tx.require_active()
        read_record(self.e, rid)  # refuses what is not a live record
        with self._lock:
            self._join(tx)
            pending = self._freeing.setdefault(tx.xid, [])
            if any(r.page == rid.page and r.slot == rid.slot for r in pending):
                raise RecordError(f"record {tuple(rid)} is already freed by transaction {tx.xid}")
            if not pending:
                tx.pre_commit.append(self._empty_at_commit)
            pending.append(rid)

    def _empty_at_commit(self, tx: Transaction) -> None:
        for rid in self._freeing.get(tx.xid, ()):
            with self.e.page(rid.page) as f:
                old = slotted.get(f.data, rid.slot)
                if old:
                    self.e.update(tx, rid.page, opcodes.OP_SLOT_REPLACE, opcodes.slot_replace_payload(rid.slot, old, b""))

    def _ended(self, xid: int, committed: bool) -> None:
        with self._lock:
            own = self._own.pop(xid, None)
            new = self._new.pop(xid, set())
            freed = self._freeing.pop(xid, [])
            reused = self._reused.pop(xid, [])
            if committed:
                if own is not None:
                    self._pool.append(own)
                for rid in freed:  # the commit record is in the log: reuse is logged after it
                    self._free.setdefault(rid.page, []).append(rid.slot)
            else:
                if own is not None and own not in new:  # its own new pages were freed by the undo
                    self._pool.append(own)
                for pid, slot in reused:  # the undo emptied them again
                    self._free.setdefault(pid, []).append(slot)


def _empty_slotted_body() -> bytes:
    """The body of an empty slotted page (no slots, heap at the page end)."""
    buf = bytearray(PAGE_SIZE)
    slotted.format_slotted(buf)
    return bytes(buf[HEADER_SIZE:])


_EMPTY_SLOTTED_BODY = _empty_slotted_body()

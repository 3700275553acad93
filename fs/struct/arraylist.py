"""Stasis' array list: fixed-size records in contiguous page ranges that double in size.

Why this shape: ``get``/``set`` are O(1) — one header read and one page — because a
record's page is computed, not searched; and the header never fills, because range ``r`` holds
``initial · 2**r`` pages, so a few dozen ``{start, length}`` entries address more pages than
any device has. (A page-per-chunk directory would degrade to a B-tree.)

Page formats (after the 32-byte page header)::

    header (ARRAY_HEADER)  magic b"TXAL", version u16, pad u16, record size u32,
                           records per page u32, count u64, initial pages u32, ranges u32,
                           then per range {start u64, length u64} (in pages)
    data   (FIXED)         aux = record size; record i of the page at 32 + i · size

**Logging.** ``set`` is a plain physical write of the record's bytes (``OP_WRITE`` with the
pre-image), *not* a nested top action: byte-range writes to disjoint records commute, so two
transactions setting different records of one page undo independently. ``append`` changes the
header count and may add a range, so it is a nested top action under the list's latch; its
logical undo zeroes the record and, if it is still the last one, shrinks the count (an append
that another transaction's append has since covered leaves a zeroed hole instead — callers that
need exact lengths under concurrent appends lock the list). Ranges, once added, stay: the list
never shrinks its space, so abort never frees a range that later records may sit in. New range
pages are formatted with ``OP_FORMAT`` (no pre-image: they were free), one small record per page.
"""

from __future__ import annotations

import struct

from ..engine import check as engine_check
from ..engine import opcodes
from ..engine.opcodes import Operation
from ..engine.page import HEADER_SIZE, PAGE_SIZE, PageType, init_header, set_aux
from ..engine.xact import Transaction
from .common import (
    U64,
    UNDO_HEAD,
    aux_of,
    format_pages,
    nested_action,
    new_page,
    pinned,
    run_inverse,
    structure_latch,
    undo_head,
    write_bytes,
)

KIND = "array"
MAGIC = b"TXAL"
VERSION = 1
_HDR = struct.Struct("<4sHHIIQII")  # magic, version, pad, size, per_page, count, initial, nranges
_COUNT_OFF = HEADER_SIZE + 16
_NRANGES_OFF = HEADER_SIZE + 28
_RANGES_OFF = HEADER_SIZE + _HDR.size
_RANGE = struct.Struct("<QQ")
MAX_RANGES = (PAGE_SIZE - _RANGES_OFF) // _RANGE.size
MAX_RECORD = PAGE_SIZE - HEADER_SIZE

OP_UNDO_APPEND = 130  # payload: undo head | index u64


class ArrayList:
    def __init__(self, engine, header_pid: int):
        self.e = engine
        self.header = header_pid
        self.latch = structure_latch(engine, header_pid)
        with pinned(engine, header_pid) as f:
            magic, version, _pad, size, per_page, _count, initial, _n = _HDR.unpack_from(f.data, HEADER_SIZE)
            ptype = f.data[3]
        if ptype != PageType.ARRAY_HEADER or magic != MAGIC:
            raise ValueError(f"page {header_pid} is not an array list header")
        self.record_size, self.per_page, self.initial = size, per_page, initial  # immutable

    @classmethod
    def create(cls, engine, tx: Transaction, record_size: int, initial_pages: int = 1,
               name: str | None = None) -> ArrayList:
        if not 1 <= record_size <= MAX_RECORD:
            raise ValueError(f"array list record size {record_size} outside 1..{MAX_RECORD}")
        if initial_pages < 1:
            raise ValueError("array list needs at least one initial page")
        header = new_page(engine, tx, PageType.ARRAY_HEADER, is_slotted=False)
        per_page = MAX_RECORD // record_size
        write_bytes(engine, tx, header, HEADER_SIZE,
                    _HDR.pack(MAGIC, VERSION, 0, record_size, per_page, 0, initial_pages, 0))
        if name is not None:
            engine.set_root(tx, f"{KIND}:{name}", header)
        return cls(engine, header)

    @classmethod
    def bulk_create(cls, engine, tx: Transaction, record_size: int, records: list[bytes],
                    name: str | None = None) -> ArrayList:
        """A new list holding ``records``, its first range sized to them and written without
        logging the records (``Engine.write_unlogged``): the header, the
        allocation and the catalog entry are the only log records. Later growth doubles from
        that first range as usual."""
        if not 1 <= record_size <= MAX_RECORD:
            raise ValueError(f"array list record size {record_size} outside 1..{MAX_RECORD}")
        if any(len(r) != record_size for r in records):
            raise ValueError(f"array list bulk load: every record must be {record_size} bytes")
        per_page = MAX_RECORD // record_size
        initial = max(1, -(-len(records) // per_page))
        header = new_page(engine, tx, PageType.ARRAY_HEADER, is_slotted=False)
        start = engine.alloc_region(tx, initial)
        lsn = engine.next_lsn()
        images = bytearray()
        for i in range(initial):
            buf = bytearray(PAGE_SIZE)
            init_header(buf, start + i, PageType.FIXED, lsn)
            set_aux(buf, record_size)
            chunk = b"".join(records[i * per_page : (i + 1) * per_page])
            buf[HEADER_SIZE : HEADER_SIZE + len(chunk)] = chunk
            images += buf
        engine.write_unlogged(start, images)
        write_bytes(engine, tx, header, HEADER_SIZE,
                    _HDR.pack(MAGIC, VERSION, 0, record_size, per_page, len(records), initial, 1)
                    + _RANGE.pack(start, initial))
        if name is not None:
            engine.set_root(tx, f"{KIND}:{name}", header)
        return cls(engine, header)

    @classmethod
    def open(cls, engine, header_pid: int) -> ArrayList:
        return cls(engine, header_pid)

    @classmethod
    def open_named(cls, engine, name: str) -> ArrayList | None:
        pid = engine.get_root(f"{KIND}:{name}")
        return cls(engine, pid) if pid else None

    # ----- addressing ---------------------------------------------------------------------------
    def _range_of(self, page_index: int) -> tuple[int, int]:
        """(range number, page index within it) of the list's ``page_index``-th page."""
        r = (page_index // self.initial + 1).bit_length() - 1
        return r, page_index - self.initial * ((1 << r) - 1)

    def _locate(self, buf, i: int) -> tuple[int, int]:
        """(page, byte offset) of record ``i``; ``buf`` is the header page."""
        page_index, slot = divmod(i, self.per_page)
        r, within = self._range_of(page_index)
        start, _length = _RANGE.unpack_from(buf, _RANGES_OFF + _RANGE.size * r)
        return start + within, HEADER_SIZE + slot * self.record_size

    def __len__(self) -> int:
        with pinned(self.e, self.header) as f:
            return U64.unpack_from(f.data, _COUNT_OFF)[0]

    def _where(self, i: int) -> tuple[int, int]:
        with pinned(self.e, self.header) as f:
            (count,) = U64.unpack_from(f.data, _COUNT_OFF)
            if i < 0:
                i += count
            if not 0 <= i < count:
                raise IndexError(f"array list index {i} outside 0..{count - 1}")
            return self._locate(f.data, i)

    # ----- records ------------------------------------------------------------------------------
    def get(self, i: int) -> bytes:
        with self.latch:
            pid, off = self._where(i)
            with pinned(self.e, pid) as f:
                return bytes(f.data[off : off + self.record_size])

    __getitem__ = get

    def set(self, tx: Transaction, i: int, value: bytes) -> None:
        """Overwrite record ``i`` (physical write; see the module docstring)."""
        value = self._check(value)
        tx.require_active()
        with self.latch:
            pid, off = self._where(i)
            write_bytes(self.e, tx, pid, off, value)

    def append(self, tx: Transaction, value: bytes) -> int:
        """Add a record at the end; return its index."""
        value = self._check(value)
        with nested_action(self.e, tx, self.latch) as act:
            index = self._append(tx, value)
            act.end(OP_UNDO_APPEND, undo_head(act, self.header) + U64.pack(index))
        return index

    def _check(self, value: bytes) -> bytes:
        value = bytes(value)
        if len(value) != self.record_size:
            raise ValueError(f"array list record of {len(value)} bytes; this list holds {self.record_size}-byte records")
        return value

    def _capacity(self, nranges: int) -> int:
        return self.per_page * self.initial * ((1 << nranges) - 1)

    def _append(self, tx: Transaction, value: bytes) -> int:
        e = self.e
        with pinned(e, self.header) as f:
            (count,) = U64.unpack_from(f.data, _COUNT_OFF)
            (nranges,) = struct.unpack_from("<I", f.data, _NRANGES_OFF)
        if count >= self._capacity(nranges):
            if nranges >= MAX_RANGES:
                raise ValueError("array list is at its maximum size")
            length = self.initial << nranges
            start = e.alloc_region(tx, length)
            format_pages(e, tx, start, length, PageType.FIXED, self.record_size)
            write_bytes(e, tx, self.header, _RANGES_OFF + _RANGE.size * nranges, _RANGE.pack(start, length))
            write_bytes(e, tx, self.header, _NRANGES_OFF, struct.pack("<I", nranges + 1))
        write_bytes(e, tx, self.header, _COUNT_OFF, U64.pack(count + 1))
        with pinned(e, self.header) as f:
            pid, off = self._locate(f.data, count)
        write_bytes(e, tx, pid, off, value)
        return count

    def __iter__(self):
        for i in range(len(self)):
            yield self.get(i)

    # ----- verification -------------------------------------------------------------------------
    def pages(self) -> list[int]:
        with pinned(self.e, self.header) as f:
            (nranges,) = struct.unpack_from("<I", f.data, _NRANGES_OFF)
            rs = [_RANGE.unpack_from(f.data, _RANGES_OFF + _RANGE.size * r) for r in range(nranges)]
        return [s + k for s, n in rs for k in range(n)]

    def check(self, pages: set | None = None) -> list[str]:
        """Header sanity, range lengths doubling, count within capacity, every range page
        allocated, typed FIXED with this record size, and owned once."""
        probs: list[str] = []
        own = pages if pages is not None else set()
        name = f"array {self.header}"
        with self.latch:
            with pinned(self.e, self.header) as f:
                buf = bytes(f.data)
            magic, version, _pad, size, per_page, count, initial, nranges = _HDR.unpack_from(buf, HEADER_SIZE)
            own.add(self.header)
            if buf[3] != PageType.ARRAY_HEADER or magic != MAGIC or version != VERSION:
                return [f"{name}: not an array list header (type {buf[3]}, magic {magic!r}, version {version})"]
            if size == 0 or per_page != MAX_RECORD // size or initial < 1 or nranges > MAX_RANGES:
                return [f"{name}: header fields inconsistent (size {size}, per page {per_page}, "
                        f"initial {initial}, ranges {nranges})"]
            if count > self._capacity(nranges):
                probs.append(f"{name}: count {count} beyond the capacity of {nranges} ranges")
            for r in range(nranges):
                start, length = _RANGE.unpack_from(buf, _RANGES_OFF + _RANGE.size * r)
                if length != initial << r:
                    probs.append(f"{name}: range {r} has {length} pages, expected {initial << r}")
                for pid in range(start, start + length):
                    if pid in own:
                        probs.append(f"{name}: page {pid} in two ranges")
                    own.add(pid)
                    if not self.e.is_allocated(pid):
                        probs.append(f"{name}: page {pid} of range {r} not allocated")
                        continue
                    with pinned(self.e, pid) as f:
                        ptype, aux = f.data[3], aux_of(f.data)
                    if ptype != PageType.FIXED or aux != size:
                        probs.append(f"{name}: page {pid} has type {ptype} / record size {aux}")
        return probs


def _undo_append(engine, tx: Transaction, payload: bytes) -> None:
    header, start = UNDO_HEAD.unpack_from(payload)
    (index,) = U64.unpack_from(payload, UNDO_HEAD.size)
    al = ArrayList(engine, header)

    def inverse() -> None:
        with pinned(engine, header) as f:
            (count,) = U64.unpack_from(f.data, _COUNT_OFF)
            if index >= count:
                return
            pid, off = al._locate(f.data, index)
        write_bytes(engine, tx, pid, off, bytes(al.record_size))
        if index == count - 1:
            write_bytes(engine, tx, header, _COUNT_OFF, U64.pack(index))

    run_inverse(engine, tx, al.latch, start, inverse)


opcodes.register(Operation(OP_UNDO_APPEND, "array_undo_append", logical_undo=_undo_append))


def _check_root(engine, pid: int, pages: set) -> list[str]:
    try:
        al = ArrayList(engine, pid)
    except ValueError as ex:
        return [str(ex)]
    return al.check(pages)


engine_check.register_checker(KIND, _check_root)

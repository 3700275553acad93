"""The operation registry: opcode → redo and undo.

A redo is an interpreter for its log payload: deterministic, reading only the payload and the
page, and it is also the forward action (``Engine.update`` logs, then runs the redo). The undo
of a physical or physiological operation is another operation — the inverse — described by an
(opcode, payload) pair; the engine logs it as a CLR and runs its redo. A *logical* undo (for
nested top actions: "remove the key I inserted") has no page; it is a function that performs
ordinary logged operations.

Opcodes below 100 are the engine's own. The structures built on the engine register theirs
(:func:`register`) when their module is imported, so whoever opens an engine whose log may hold
them imports those modules first (the filesystem does: ``traxfs.fs.struct``). An opcode nobody
registered is an error that names it; met in the log (:func:`for_record`), it also names the
record, and recovery stops before changing anything.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from ...ext.slotpage import delete_redo, insert_redo, patch_redo, swap_runs
from . import slotted
from .page import HEADER_SIZE, PAGE_SIZE, get_aux, set_aux

Redo = Callable[[bytearray, bytes], None]
Undo = Callable[[bytes], tuple[int, bytes]]
LogicalUndo = Callable[[object, object, bytes], None]  # (engine, transaction, payload)


class UnknownOperation(Exception):
    pass


@dataclass(frozen=True)
class Operation:
    opcode: int
    name: str
    redo: Redo | None = None  # None: logical-only (no page)
    undo: Undo | None = None  # physical/physiological inverse
    logical_undo: LogicalUndo | None = None


REGISTRY: dict[int, Operation] = {}


def register(op: Operation) -> Operation:
    old = REGISTRY.get(op.opcode)
    if old is not None and old.name != op.name:
        raise ValueError(f"opcode {op.opcode} already registered as {old.name}")
    REGISTRY[op.opcode] = op
    return op


def lookup(opcode: int) -> Operation:
    try:
        return REGISTRY[opcode]
    except KeyError:
        raise UnknownOperation(f"unknown operation opcode {opcode} (not registered)") from None


def for_record(rec, where: str) -> Operation:
    """The operation of log record ``rec`` of the engine ``where``; :class:`UnknownOperation`
    naming the record when no module loaded registered its opcode."""
    op = REGISTRY.get(rec.opcode)
    if op is None:
        raise UnknownOperation(f"{where}: log record {rec.lsn} uses opcode {rec.opcode} (unknown: the structure "
                               "that wrote it is not loaded); import the module that registers it (for a "
                               "filesystem, traxfs.fs.struct) before opening the engine")
    return op


# ----- byte ranges (physical) -----------------------------------------------------------------
OP_WRITE = 1
_W = struct.Struct("<HH")


def write_payload(offset: int, old: bytes, new: bytes) -> bytes:
    if len(old) != len(new) or offset < HEADER_SIZE or offset + len(new) > PAGE_SIZE:
        raise ValueError("OP_WRITE: bad range")
    return _W.pack(offset, len(new)) + old + new


def _write_redo(page: bytearray, p: bytes) -> None:
    off, n = _W.unpack_from(p)
    if off < HEADER_SIZE or off + n > PAGE_SIZE or len(p) != 4 + 2 * n:
        raise ValueError(f"OP_WRITE: range [{off}, {off + n}) or payload of {len(p)} bytes is invalid")
    page[off : off + n] = p[4 + n : 4 + 2 * n]


def _write_undo(p: bytes) -> tuple[int, bytes]:
    off, n = _W.unpack_from(p)
    return OP_WRITE, p[:4] + p[4 + n : 4 + 2 * n] + p[4 : 4 + n]


register(Operation(OP_WRITE, "write", _write_redo, _write_undo))

# ----- whole page image (physical): formats, splits ---------------------------------------------
OP_IMAGE = 2
_IMG = struct.Struct("<BQ")  # type, aux; then the body after the header


def image_of(page: bytes | bytearray) -> bytes:
    return _IMG.pack(page[3], get_aux(page)) + bytes(page[HEADER_SIZE:])


def image_payload(old_page: bytes | bytearray, new_type: int, new_aux: int, new_body: bytes) -> bytes:
    body = new_body.ljust(PAGE_SIZE - HEADER_SIZE, b"\0")
    if len(body) != PAGE_SIZE - HEADER_SIZE:
        raise ValueError("OP_IMAGE: body too large")
    return image_of(old_page) + _IMG.pack(new_type, new_aux) + body


_IMG_LEN = _IMG.size + PAGE_SIZE - HEADER_SIZE


def _image_redo(page: bytearray, p: bytes) -> None:
    if len(p) != 2 * _IMG_LEN:
        raise ValueError(f"OP_IMAGE: payload of {len(p)} bytes, expected {2 * _IMG_LEN}")
    ptype, aux = _IMG.unpack_from(p, _IMG_LEN)
    page[3] = ptype
    set_aux(page, aux)
    page[HEADER_SIZE:] = p[_IMG_LEN + _IMG.size :]


def _image_undo(p: bytes) -> tuple[int, bytes]:
    return OP_IMAGE, p[_IMG_LEN:] + p[:_IMG_LEN]


register(Operation(OP_IMAGE, "image", _image_redo, _image_undo))

# ----- bits (physiological, commute: allocation maps shared by concurrent transactions) ---------
OP_SET_BIT, OP_CLEAR_BIT = 3, 4
_BIT = struct.Struct("<I")


def _bit_redo(value: int) -> Redo:
    def redo(page: bytearray, p: bytes) -> None:
        (i,) = _BIT.unpack(p)
        byte, mask = HEADER_SIZE + i // 8, 1 << (i % 8)
        page[byte] = (page[byte] | mask) if value else (page[byte] & ~mask)
    return redo


register(Operation(OP_SET_BIT, "set_bit", _bit_redo(1), lambda p: (OP_CLEAR_BIT, p)))
register(Operation(OP_CLEAR_BIT, "clear_bit", _bit_redo(0), lambda p: (OP_SET_BIT, p)))

OP_SET_BITS, OP_CLEAR_BITS = 9, 10
_BITS = struct.Struct("<II")  # first bit, count


def _bits_redo(value: int) -> Redo:
    def redo(page: bytearray, p: bytes) -> None:
        first, n = _BITS.unpack(p)
        if first + n > (PAGE_SIZE - HEADER_SIZE) * 8:
            raise ValueError("bit range outside the page")
        if not n:
            return
        # bit i is bit i % 8 of byte i // 8: the bytes the run touches, as one little-endian
        # integer, changed with one mask (a data extent sets hundreds of bits; a loop over them
        # was 5% of a 1 MiB write)
        lo, hi = HEADER_SIZE + first // 8, HEADER_SIZE + (first + n + 7) // 8
        mask = ((1 << n) - 1) << (first % 8)
        bits = int.from_bytes(page[lo:hi], "little")
        page[lo:hi] = (bits | mask if value else bits & ~mask).to_bytes(hi - lo, "little")
    return redo


register(Operation(OP_SET_BITS, "set_bits", _bits_redo(1), lambda p: (OP_CLEAR_BITS, p)))
register(Operation(OP_CLEAR_BITS, "clear_bits", _bits_redo(0), lambda p: (OP_SET_BITS, p)))


def bits_payload(first: int, count: int) -> bytes:
    return _BITS.pack(first, count)

# ----- slotted pages (physiological: by slot index, survives compaction) -------------------------
OP_SLOT_INSERT, OP_SLOT_DELETE, OP_SLOT_REPLACE = 5, 6, 7
_IDX = struct.Struct("<H")
_REP = struct.Struct("<HH")


def _rep_payload(i: int, old: bytes, new: bytes) -> bytes:
    return _REP.pack(i, len(old)) + old + new


def _rep_redo(page: bytearray, p: bytes) -> None:
    i, n = _REP.unpack_from(p)
    slotted.replace(page, i, p[4 + n :])


def _rep_undo(p: bytes) -> tuple[int, bytes]:
    i, n = _REP.unpack_from(p)
    return OP_SLOT_REPLACE, _rep_payload(i, p[4 + n :], p[4 : 4 + n])


register(Operation(OP_SLOT_INSERT, "slot_insert", insert_redo, lambda p: (OP_SLOT_DELETE, p)))
register(Operation(OP_SLOT_DELETE, "slot_delete", delete_redo, lambda p: (OP_SLOT_INSERT, p)))
register(Operation(OP_SLOT_REPLACE, "slot_replace", _rep_redo, _rep_undo))


def slot_insert_payload(i: int, body: bytes) -> bytes:
    return _IDX.pack(i) + body


def slot_delete_payload(i: int, old_body: bytes) -> bytes:
    return _IDX.pack(i) + old_body


def slot_replace_payload(i: int, old: bytes, new: bytes) -> bytes:
    return _rep_payload(i, old, new)


# A record overwritten by one of the same length: only the runs of bytes that changed, each with
# its old and new bytes (``traxfs.ext.slotpage.diff_runs``), instead of both records whole — an
# inode record or a checksum group rewritten for a few bytes. Redo checks the old bytes are there.
OP_SLOT_PATCH = 12
register(Operation(OP_SLOT_PATCH, "slot_patch", patch_redo, lambda p: (OP_SLOT_PATCH, p[:2] + swap_runs(p[2:]))))


def slot_patch_payload(i: int, runs: bytes) -> bytes:
    return _IDX.pack(i) + runs


# ----- the page's aux word ------------------------------------------------------------------------
OP_SET_AUX = 8
_AUX = struct.Struct("<QQ")


def _aux_redo(page: bytearray, p: bytes) -> None:
    set_aux(page, _AUX.unpack(p)[1])


def _aux_undo(p: bytes) -> tuple[int, bytes]:
    old, new = _AUX.unpack(p)
    return OP_SET_AUX, _AUX.pack(new, old)


register(Operation(OP_SET_AUX, "set_aux", _aux_redo, _aux_undo))


def aux_payload(old: int, new: int) -> bytes:
    return _AUX.pack(old, new)


# ----- counters (physiological; Stasis' Tincrement / Tdecrement) --------------------------------
OP_ADD = 11
_ADD = struct.Struct("<Hq")  # offset of a little-endian u64 on the page, signed delta
_U64 = struct.Struct("<Q")


def add_payload(offset: int, delta: int) -> bytes:
    """Add ``delta`` (wrapping mod 2**64) to the u64 at ``offset``: the log carries the delta,
    not images, and the inverse is the negated delta, so concurrent increments of one counter
    commute (like the allocation bits) and undo never restores a stale value."""
    if offset < HEADER_SIZE or offset + 8 > PAGE_SIZE or not -(1 << 63) <= delta < 1 << 63:
        raise ValueError(f"OP_ADD: offset {offset} or delta {delta} out of range")
    return _ADD.pack(offset, delta)


def _add_redo(page: bytearray, p: bytes) -> None:
    if len(p) != _ADD.size:
        raise ValueError(f"OP_ADD: payload of {len(p)} bytes, expected {_ADD.size}")
    off, delta = _ADD.unpack(p)
    if off < HEADER_SIZE or off + 8 > PAGE_SIZE:
        raise ValueError(f"OP_ADD: offset {off} outside the page body")
    _U64.pack_into(page, off, (_U64.unpack_from(page, off)[0] + delta) & 0xFFFFFFFFFFFFFFFF)


def _add_undo(p: bytes) -> tuple[int, bytes]:
    off, delta = _ADD.unpack(p)
    return OP_ADD, _ADD.pack(off, -delta if delta != -(1 << 63) else delta)


register(Operation(OP_ADD, "add", _add_redo, _add_undo))

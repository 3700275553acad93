"""Slotted pages: variable-length records addressed by slot index.

Layout after the 32-byte page header::

    nslots    u16   entries in the slot directory
    heap_top  u16   lowest byte used by record bodies (bodies grow down from the page end)
    (directory) nslots × (offset u16, length u16), in slot order

Slot order is meaningful: the B+tree keeps entries sorted by inserting at an index. Deleting or
inserting at an index shifts the directory. When the gap between directory and heap is too
small but the page has enough free bytes in all, the heap is compacted in place without logging
(Stasis: "defragmented without logging"): compaction changes only where bodies sit, never the
slot order or contents, which is all that log records refer to.

``free_space``, ``insert``, ``delete`` and ``records`` (and ``PageFull``) are in C (``traxfs.ext.slotpage``);
the rest is here.
"""

from __future__ import annotations

import struct

from ...ext.slotpage import DIR_START_AT as _C_DIR_START
from ...ext.slotpage import PageFull, delete, free_space, insert, records  # noqa: F401 (this module's API, in C)
from .page import HEADER_SIZE, PAGE_SIZE

_META = struct.Struct("<HH")
_SLOT = struct.Struct("<HH")
DIR_START = HEADER_SIZE + _META.size
MAX_RECORD = PAGE_SIZE - DIR_START - _SLOT.size
if _C_DIR_START != DIR_START:  # the C edits must read the directory where this layout puts it
    raise ImportError(f"traxfs.ext.slotpage edits slots at {_C_DIR_START}, slotted pages keep them at {DIR_START}")


def format_slotted(buf: bytearray) -> None:
    _META.pack_into(buf, HEADER_SIZE, 0, PAGE_SIZE)


def build(buf: bytearray, bodies: list[bytes]) -> None:
    """Fill an empty slotted page with ``bodies`` in slot order in one pass (bulk loads lay out
    whole pages in memory; inserting one by one would move the directory every time)."""
    n = len(bodies)
    lens = [len(b) for b in bodies]
    top = PAGE_SIZE - sum(lens)
    if top < DIR_START + 4 * n:
        raise PageFull(f"{n} records of {sum(lens)} bytes do not fit one page")
    slots, pos = [], PAGE_SIZE
    for ln in lens:  # the first record sits highest, as successive inserts would put it
        pos -= ln
        slots += (pos, ln)
    buf[top:PAGE_SIZE] = b"".join(reversed(bodies))
    struct.pack_into(f"<HH{2 * n}H", buf, HEADER_SIZE, n, top, *slots)


def count(buf: bytes | bytearray) -> int:
    return _META.unpack_from(buf, HEADER_SIZE)[0]


def _slot(buf: bytes | bytearray, i: int) -> tuple[int, int]:
    return _SLOT.unpack_from(buf, DIR_START + 4 * i)


def get(buf: bytes | bytearray, i: int) -> bytes:
    off, n = _slot(buf, i)
    return bytes(buf[off : off + n])


def fits(buf: bytes | bytearray, size: int) -> bool:
    return free_space(buf) >= size + 4


def replace(buf: bytearray, i: int, body: bytes) -> bytes:
    old = delete(buf, i)
    try:
        insert(buf, i, body)
    except PageFull:
        insert(buf, i, old)
        raise
    return old

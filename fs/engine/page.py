"""The page format: fixed-size pages with a header carrying type, LSN and crc32c.

Page size is 4096 bytes. Why: it is the kernel page and the filesystem block, so a page maps
to one aligned O_DIRECT transfer and one FUSE/page-cache unit; it is Stasis' size, so its
per-page costs and structures (slotted pages, B-tree fan-out ~100 for 32-byte keys) carry over;
and it is the write unit that flash and 4Kn disks make atomic in practice — the crc32c catches
the torn cases where it is not. Bulk data (file contents, table minipages) does not live in
pages at all: it goes to track-aligned extents from the volume, so the page size does not have
to serve streaming.

Header (32 bytes, little-endian)::

    magic    u16  0x5458 ("TX")
    version  u8   PAGE_VERSION
    type     u8   page type (PageType)
    crc      u32  crc32c of the page with this field zeroed, seeded with the engine's page
                  seed (drawn at format: a page an earlier format left behind fails it)
    page_id  u64  the page's own number (catches misdirected writes)
    lsn      u64  LSN of the last log record applied to the page
    aux      u64  layout-specific (slot count, next pointer, ...)

A page that was never written is all zeros; it reads as type FREE with LSN 0.
"""

from __future__ import annotations

import enum
import struct

import crc32c

PAGE_SIZE = 4096
PAGE_MAGIC = 0x5458
PAGE_VERSION = 1
HEADER = struct.Struct("<HBBIQQQ")
HEADER_SIZE = HEADER.size  # 32
_CRC_OFF = 4


class PageType(enum.IntEnum):
    FREE = 0
    SUPER = 1
    SLOTTED = 2
    FIXED = 3
    BTREE_LEAF = 4
    BTREE_INNER = 5
    ALLOC_MAP = 6
    HASH_HEADER = 7
    ARRAY_HEADER = 8
    BTREE_HEADER = 9  # fs/struct/btree.py: the tree's identity (root pid, count)
    LIST_HEADER = 10  # fs/struct/linkedlist.py: head, tail, count


class PageCorrupt(Exception):
    """A page failed its checksum or identity check; the message names the page and the damage."""


def init_header(buf: bytearray, page_id: int, ptype: int, lsn: int = 0) -> None:
    buf[:PAGE_SIZE] = bytes(PAGE_SIZE)
    HEADER.pack_into(buf, 0, PAGE_MAGIC, PAGE_VERSION, ptype, 0, page_id, lsn, 0)


def page_type(buf: bytes | bytearray) -> int:
    return buf[3]


def page_lsn(buf: bytes | bytearray) -> int:
    return struct.unpack_from("<Q", buf, 16)[0]


def set_page_lsn(buf: bytearray, lsn: int) -> None:
    struct.pack_into("<Q", buf, 16, lsn)


def get_aux(buf: bytes | bytearray) -> int:
    return struct.unpack_from("<Q", buf, 24)[0]


def set_aux(buf: bytearray, value: int) -> None:
    struct.pack_into("<Q", buf, 24, value)


def seal(buf: bytearray, page_id: int, seed: int) -> None:
    """Stamp the page's identity (magic, version, number) and checksum, just before it is
    written. Identity belongs to the write path, not to operations: a page formatted by a
    logged operation gets it here whatever it was before. ``seed``: the engine's page seed
    (``Superblock.page_seed``), which makes the checksum this format's."""
    struct.pack_into("<HB", buf, 0, PAGE_MAGIC, PAGE_VERSION)
    struct.pack_into("<Q", buf, 8, page_id)
    struct.pack_into("<I", buf, _CRC_OFF, 0)
    struct.pack_into("<I", buf, _CRC_OFF, crc32c.crc32c(buf, seed))


def verify(buf: bytes | bytearray, page_id: int, seed: int, where: str = "") -> None:
    """Check a page just read against the engine's page seed. All-zero pages (never written)
    pass as FREE. A page of an earlier format on the device fails the checksum: it is not
    this engine's, whatever LSN it carries."""
    magic, version, _ptype, crc, pid, _lsn, _aux = HEADER.unpack_from(buf)
    if magic == 0 and not any(buf):
        return
    name = f"{where}page {page_id}"
    if magic != PAGE_MAGIC:
        raise PageCorrupt(f"{name}: bad magic {magic:#06x} (not a traxfs page or overwritten)")
    tmp = bytearray(buf)
    struct.pack_into("<I", tmp, _CRC_OFF, 0)
    if crc32c.crc32c(tmp, seed) != crc:
        raise PageCorrupt(f"{name}: checksum mismatch (torn or corrupted page, or left by an earlier format)")
    if version != PAGE_VERSION:
        raise PageCorrupt(f"{name}: page format version {version}, this traxfs reads {PAGE_VERSION}")
    if pid != page_id:
        raise PageCorrupt(f"{name}: holds page {pid} (misdirected write)")

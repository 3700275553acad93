"""The B+tree's pages (see :mod:`traxfs.fs.struct.btree` for the tree): the header layout, leaf and
inner records, in-page search (bisection in C, ``traxfs.ext.nodesearch``), separators and the
byte-balanced split point, and the size limits every entry keeps.

Page formats (after the 32-byte page header)::

    header  (BTREE_HEADER)  magic b"TXBT", version u16, pad u16, root u64, count u64
                            (count: version 1 only; version 2 keeps it 0, see VERSION)
    leaf    (BTREE_LEAF)    slotted; aux = right sibling (0: last leaf);
                            record = klen u16 | key | value, sorted by key
    inner   (BTREE_INNER)   slotted; aux = level (1 = just above the leaves);
                            record = child u64 | separator key; record 0's key is empty (−∞)
"""

from __future__ import annotations

import struct

from ...ext.nodesearch import DIR_START as _SEARCH_DIR_START
from ...ext.nodesearch import leaf_bisect
from ..engine.page import HEADER_SIZE, PageType
from .common import DIR_START, HH, PAGE_CAPACITY, U16, U64

MAX_KEY = 1024
MAX_ENTRY = 1300
KIND = "btree"
MAGIC = b"TXBT"
# Version 2 stopped keeping the entry count in the header: one more logged update of the header
# page per put and delete, ~15% of a put, for a number only ``len()`` and the check read. A
# version 1 tree is read as it is and becomes version 2 at its first change.
VERSION = 2
VERSIONS_READ = (1, 2)
HDR = struct.Struct("<4sHHQQ")  # at HEADER_SIZE: magic, version, pad, root, count
ROOT_OFF = HEADER_SIZE + 8
COUNT_OFF = HEADER_SIZE + 16
VERSION_OFF = HEADER_SIZE + 4
VERSION_FIELD = struct.Struct("<H")
LEAF, INNER = PageType.BTREE_LEAF, PageType.BTREE_INNER
if _SEARCH_DIR_START != DIR_START:  # the C search reads the slot directory where slotted puts it
    raise ImportError(f"traxfs.ext.nodesearch reads slots at {_SEARCH_DIR_START}, slotted pages keep them at {DIR_START}")


def leaf_record(key: bytes, value: bytes) -> bytes:
    return U16.pack(len(key)) + key + value


def inner_record(child: int, key: bytes) -> bytes:
    return U64.pack(child) + key


def leaf_item(buf, i: int) -> tuple[bytes, bytes]:
    off, ln = HH.unpack_from(buf, DIR_START + 4 * i)
    (kl,) = U16.unpack_from(buf, off)
    return bytes(buf[off + 2 : off + 2 + kl]), bytes(buf[off + 2 + kl : off + ln])


def inner_key(buf, i: int) -> bytes:
    off, ln = HH.unpack_from(buf, DIR_START + 4 * i)
    return bytes(buf[off + 8 : off + ln])


def inner_child(buf, i: int) -> int:
    off, _ = HH.unpack_from(buf, DIR_START + 4 * i)
    return U64.unpack_from(buf, off)[0]


def rec_key(rec: bytes, leaf: bool) -> bytes:
    if leaf:
        return rec[2 : 2 + U16.unpack_from(rec)[0]]
    return rec[8:]


def leaf_search(buf, key: bytes) -> tuple[int, int]:
    """(index of the first key >= ``key``, slot count)."""
    return leaf_bisect(buf, key)


def separator(left_last: bytes, right_first: bytes) -> bytes:
    """The shortest key ``s`` with ``left_last < s <= right_first``."""
    n = min(len(left_last), len(right_first))
    i = 0
    while i < n and left_last[i] == right_first[i]:
        i += 1
    return right_first[: i + 1]


def split_point(sizes: list[int]) -> int:
    """Index s (1 <= s < len) splitting records of these sizes into two pages, by bytes."""
    total = sum(sizes)
    best, best_s, acc = None, 0, 0
    for s in range(1, len(sizes)):
        acc += sizes[s - 1]
        if acc <= PAGE_CAPACITY and total - acc <= PAGE_CAPACITY:
            d = abs(2 * acc - total)
            if best is None or d < best:
                best, best_s = d, s
    if best is None:
        raise AssertionError("no 2-way split fits (record size limits violated)")
    return best_s


def check_sizes(key: bytes, value: bytes) -> None:
    if len(key) > MAX_KEY:
        raise ValueError(f"B+tree key of {len(key)} bytes exceeds the limit of {MAX_KEY}")
    if len(key) + len(value) > MAX_ENTRY:
        raise ValueError(f"B+tree key + value of {len(key) + len(value)} bytes exceeds the limit of {MAX_ENTRY}")

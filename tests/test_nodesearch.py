"""The C node search (``traxfs.ext.nodesearch``) against ``bisect`` over the decoded keys, on
slotted pages built as the B+tree builds them; the descent through real frames of a pin table
(pins and latches given back, also when a page is refused); damaged pages are refused, not read
past."""

from __future__ import annotations

import struct
import threading
from bisect import bisect_left, bisect_right
from collections import OrderedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traxfs.ext.nodesearch import descend, leaf_bisect, leaf_find
from traxfs.ext.pagepin import Frame, PinTable
from traxfs.fs.engine import slotted
from traxfs.fs.engine.page import PAGE_SIZE, PageType
from traxfs.fs.struct.btree_node import inner_record, leaf_record

KEYS = st.lists(st.binary(max_size=12), max_size=60, unique=True).map(sorted)


def _page(records: list[bytes]) -> bytearray:
    buf = bytearray(PAGE_SIZE)
    slotted.format_slotted(buf)
    slotted.build(buf, records)
    return buf


@given(keys=KEYS, probe=st.binary(max_size=12))
def test_leaf_search_is_bisect_over_the_keys(keys, probe):
    buf = _page([leaf_record(k, b"v" * (len(k) % 5)) for k in keys])
    assert leaf_bisect(buf, probe) == (bisect_left(keys, probe), len(keys))
    assert leaf_bisect(bytes(buf), probe, True) == (bisect_right(keys, probe), len(keys))


class Pages:
    """A pin table over frames built in memory, as the buffer keeps them; ``pin`` (the buffer's
    loading path) makes the frame of a page that is not resident yet."""

    def __init__(self, pages: dict[int, bytearray], resident: set[int]):
        self.pages, self.frames, self.loads = pages, OrderedDict(), []
        self.table = PinTable(self.frames, threading.Lock())
        for pid in resident:
            self._add(pid).pins = 0

    def _add(self, pid: int) -> Frame:
        f = self.frames[pid] = Frame(pid, bytearray(self.pages[pid]), threading.RLock(), threading.Event())
        f.ready = True
        f.loaded.set()
        return f

    def pin(self, pid: int) -> Frame:
        self.loads.append(pid)
        return self._add(pid)  # pinned once, as a new frame is

    def released(self) -> bool:
        """No pin held, no latch held."""
        return all(f.pins == 0 and f.latch.acquire(False) and (f.latch.release() or True) for f in self.frames.values())


def _node(ptype: int, records: list[bytes]) -> bytearray:
    buf = _page(records)
    buf[3] = ptype
    return buf


@given(keys=KEYS.filter(bool), probe=st.binary(max_size=12), resident=st.booleans())
def test_descend_finds_the_covering_child(keys, probe, resident):
    root = _node(PageType.BTREE_INNER, [inner_record((1 << 40) + i, k) for i, k in enumerate(keys)])
    pages = {7: root} | {(1 << 40) + i: _node(PageType.BTREE_LEAF, []) for i in range(len(keys))}
    mem = Pages(pages, set(pages) if resident else {7})
    want = bisect_right(keys[1:], probe)  # slot 0's key is never compared
    path: list = []
    assert descend(mem.table, mem.pin, 7, probe, PageType.BTREE_INNER, path) == (1 << 40) + want
    assert path == [(7, want, len(keys))]
    assert mem.loads == ([] if resident else [(1 << 40) + want]) and mem.released()
    assert descend(mem.table, mem.pin, (1 << 40) + want, probe, PageType.BTREE_INNER) == (1 << 40) + want


@given(keys=KEYS, probe=st.binary(max_size=12))
def test_leaf_find_returns_the_value_under_the_key(keys, probe):
    values = [b"v" * (len(k) % 5) + k for k in keys]
    buf = _page([leaf_record(k, v) for k, v in zip(keys, values, strict=True)])
    i = bisect_left(keys, probe)
    want = values[i] if i < len(keys) and keys[i] == probe else None
    assert leaf_find(buf, probe) == (i, len(keys), want)


def test_damaged_pages_are_refused():
    buf = _page([leaf_record(b"a", b"1"), leaf_record(b"b", b"2")])
    bad = bytearray(buf)
    struct.pack_into("<HH", bad, slotted.DIR_START, PAGE_SIZE - 2, 40)  # slot 0 runs past the end
    with pytest.raises(ValueError, match="slot 0 .* passes the page end"):
        leaf_bisect(bad, b"a")
    bad = bytearray(buf)
    struct.pack_into("<H", bad, 32, 2000)  # a directory longer than the page
    with pytest.raises(ValueError, match="2000 slots"):
        leaf_bisect(bad, b"a")
    bad = bytearray(buf)
    off = struct.unpack_from("<H", bad, slotted.DIR_START)[0]
    struct.pack_into("<H", bad, off, 500)  # key length beyond its record
    with pytest.raises(ValueError, match="key of 500 bytes"):
        leaf_bisect(bad, b"a")
    with pytest.raises(ValueError, match="key of 500 bytes"):
        leaf_find(bad, b"a")
    with pytest.raises(ValueError, match="too short"):
        leaf_bisect(b"\0" * 10, b"a")
    inner = _node(PageType.BTREE_INNER, [inner_record(7, b""), inner_record(8, b"m")])
    struct.pack_into("<HH", inner, slotted.DIR_START + 4, PAGE_SIZE - 4, 12)  # slot 1 past the end
    mem = Pages({1: inner, 2: _node(PageType.BTREE_INNER, [])}, {1, 2})
    with pytest.raises(ValueError, match="slot 1 .* passes the page end"):
        descend(mem.table, mem.pin, 1, b"z", PageType.BTREE_INNER)
    with pytest.raises(ValueError, match="inner node 2 without children"):
        descend(mem.table, mem.pin, 2, b"a", PageType.BTREE_INNER)
    assert mem.released()  # a refused page gives its pin and latch back

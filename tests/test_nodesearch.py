"""The C node search (``traxfs.ext.nodesearch``) against ``bisect`` over the decoded keys, on
slotted pages built as the B+tree builds them; damaged pages are refused, not read past."""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traxfs.ext.nodesearch import inner_bisect, inner_step, leaf_bisect, leaf_find
from traxfs.fs.engine import slotted
from traxfs.fs.engine.page import PAGE_SIZE
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


@given(keys=KEYS, probe=st.binary(max_size=12))
def test_inner_search_finds_the_covering_child(keys, probe):
    buf = _page([inner_record(1000 + i, k) for i, k in enumerate(keys)])
    want = bisect_right(keys[1:], probe) if keys else 0  # slot 0's key is never compared
    assert inner_bisect(buf, probe) == (want, len(keys))


@given(keys=KEYS, probe=st.binary(max_size=12))
def test_leaf_find_returns_the_value_under_the_key(keys, probe):
    values = [b"v" * (len(k) % 5) + k for k in keys]
    buf = _page([leaf_record(k, v) for k, v in zip(keys, values, strict=True)])
    i = bisect_left(keys, probe)
    want = values[i] if i < len(keys) and keys[i] == probe else None
    assert leaf_find(buf, probe) == (i, len(keys), want)


@given(keys=KEYS.filter(bool), probe=st.binary(max_size=12))
def test_inner_step_names_the_covering_child(keys, probe):
    buf = _page([inner_record((1 << 40) + 1000 + i, k) for i, k in enumerate(keys)])
    want = bisect_right(keys[1:], probe)
    assert inner_step(buf, probe) == (want, len(keys), (1 << 40) + 1000 + want)


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
    inner = _page([inner_record(7, b""), inner_record(8, b"m")])
    struct.pack_into("<HH", inner, slotted.DIR_START + 4, PAGE_SIZE - 4, 12)  # slot 1 past the end
    with pytest.raises(ValueError, match="slot 1 .* passes the page end"):
        inner_step(inner, b"z")
    with pytest.raises(ValueError, match="without children"):
        inner_step(_page([]), b"a")

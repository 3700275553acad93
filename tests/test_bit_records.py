"""The allocation map's bit-run records (``OP_SET_BITS`` / ``OP_CLEAR_BITS``) against their
definition: bit i of the map is bit ``i % 8`` of byte ``HEADER_SIZE + i // 8``; a run changes
exactly its own bits, and a run past the page's end is refused with the page unchanged."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traxfs.fs.engine import opcodes
from traxfs.fs.engine.page import HEADER_SIZE, PAGE_SIZE

pytestmark = pytest.mark.timeout(120)

BITS = (PAGE_SIZE - HEADER_SIZE) * 8


def by_definition(page: bytearray, first: int, count: int, value: int) -> None:
    for i in range(first, first + count):
        byte, mask = HEADER_SIZE + i // 8, 1 << (i % 8)
        page[byte] = (page[byte] | mask) if value else (page[byte] & ~mask)


@st.composite
def runs(draw):
    first = draw(st.integers(0, BITS - 1))
    count = draw(st.integers(0, min(BITS - first, draw(st.sampled_from([9, 70, 700, BITS])))))
    return first, count


@given(st.integers(0, 2**32), runs(), st.booleans())
def test_a_bit_run_changes_exactly_its_bits(seed, run, value):
    first, count = run
    start = random.Random(seed).randbytes(PAGE_SIZE)
    want, got = bytearray(start), bytearray(start)
    by_definition(want, first, count, value)
    op = opcodes.OP_SET_BITS if value else opcodes.OP_CLEAR_BITS
    opcodes.lookup(op).redo(got, opcodes.bits_payload(first, count))
    assert got == want


@pytest.mark.parametrize("first, count", [(BITS - 3, 4), (BITS, 1), (0, BITS + 1)])
def test_a_bit_run_past_the_page_is_refused_and_changes_nothing(first, count):
    page = bytearray(range(256)) * (PAGE_SIZE // 256)
    before = bytes(page)
    with pytest.raises(ValueError, match="outside the page"):
        opcodes.lookup(opcodes.OP_SET_BITS).redo(page, opcodes.bits_payload(first, count))
    assert page == before

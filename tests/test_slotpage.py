"""Slotted pages (``traxfs.fs.engine.slotted``, edits in C in ``traxfs.ext.slotpage``) against a
list of bodies: any sequence of inserts, deletes and replaces — compactions included — leaves
the page holding exactly the list, with the free space the layout promises; damaged pages are
refused, never written past."""

from __future__ import annotations

import struct

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from traxfs.ext.slotpage import cut_run, delete_redo, insert_redo, paste_run, patch_redo
from traxfs.fs.engine import slotted
from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.struct.common import run_payload

BODIES = st.one_of(st.binary(max_size=40), st.binary(min_size=200, max_size=1500))


class SlottedPageMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.page = bytearray(PAGE_SIZE)
        slotted.format_slotted(self.page)
        self.model: list[bytes] = []

    def _room(self) -> int:
        return PAGE_SIZE - slotted.DIR_START - sum(len(b) + 4 for b in self.model)

    @rule(data=st.data(), body=BODIES)
    def insert(self, data, body):
        i = data.draw(st.integers(0, len(self.model)))
        if self._room() >= len(body) + 4:
            slotted.insert(self.page, i, body)
            self.model.insert(i, body)
        else:
            with pytest.raises(slotted.PageFull):
                slotted.insert(self.page, i, body)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def delete(self, data):
        i = data.draw(st.integers(0, len(self.model) - 1))
        assert slotted.delete(self.page, i) == self.model.pop(i)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), body=BODIES)
    def replace(self, data, body):
        i = data.draw(st.integers(0, len(self.model) - 1))
        if self._room() + len(self.model[i]) >= len(body):
            assert slotted.replace(self.page, i, body) == self.model[i]
            self.model[i] = body
        else:
            before = slotted.records(self.page)
            with pytest.raises(slotted.PageFull):
                slotted.replace(self.page, i, body)
            assert slotted.records(self.page) == before

    @rule(data=st.data(), bodies=st.lists(st.one_of(st.binary(max_size=60), st.binary(min_size=300, max_size=900)), max_size=8))
    def paste_a_run(self, data, bodies):
        """A split's paste: the page the inserts one by one would leave, or refused whole."""
        i = data.draw(st.integers(0, len(self.model)))
        if self._room() >= sum(len(b) + 4 for b in bodies):
            one_by_one = bytearray(self.page)
            for j, b in enumerate(bodies):
                slotted.insert(one_by_one, i + j, b)
            paste_run(self.page, run_payload(i, bodies))
            assert self.page == one_by_one
            self.model[i:i] = bodies
        else:
            before = bytes(self.page)
            with pytest.raises(slotted.PageFull):
                paste_run(self.page, run_payload(i, bodies))
            assert self.page == before

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def cut_a_run(self, data):
        """A split's cut: the slots holding the logged records go, the page as the deletes one by
        one would leave it; a run the slots do not hold is refused with the page unchanged."""
        i = data.draw(st.integers(0, len(self.model) - 1))
        k = data.draw(st.integers(1, len(self.model) - i))
        wrong = data.draw(st.booleans())
        run = list(self.model[i:i + k])
        if wrong:
            run[-1] = run[-1] + b"?"
            before = bytes(self.page)
            with pytest.raises(ValueError, match="does not hold the logged record"):
                cut_run(self.page, run_payload(i, run))
            assert self.page == before
            return
        one_by_one = bytearray(self.page)
        for j in range(k - 1, -1, -1):
            slotted.delete(one_by_one, i + j)
        cut_run(self.page, run_payload(i, run))
        assert self.page == one_by_one
        del self.model[i:i + k]

    @rule(i=st.integers(-3, 3))
    def out_of_range(self, i):
        n = len(self.model)
        with pytest.raises(ValueError, match="outside"):
            slotted.insert(self.page, n + 1 + abs(i), b"x")
        with pytest.raises(ValueError, match="outside"):
            slotted.delete(self.page, n + abs(i))

    @invariant()
    def matches_the_list(self):
        assert slotted.records(self.page) == self.model
        assert slotted.free_space(self.page) == self._room()
        assert slotted.free_space(bytes(self.page)) == self._room()  # read-only pages too


TestSlottedPage = SlottedPageMachine.TestCase


def test_damaged_pages_are_refused():
    page = bytearray(PAGE_SIZE)
    slotted.format_slotted(page)
    slotted.insert(page, 0, b"abc")
    bad = bytearray(page)
    struct.pack_into("<H", bad, 32, 5000)  # more slots than the page can hold
    for op in (lambda: slotted.free_space(bad), lambda: slotted.insert(bad, 0, b"x"), lambda: slotted.delete(bad, 0)):
        with pytest.raises(ValueError, match="5000 slots"):
            op()
    bad = bytearray(page)
    struct.pack_into("<HH", bad, slotted.DIR_START, PAGE_SIZE - 1, 3)  # a body past the end
    with pytest.raises(ValueError, match="passes the page end"):
        slotted.delete(bad, 0)
    full = bytearray(bad)
    struct.pack_into("<H", full, 34, 40)  # heap top below the directory: the insert must compact
    with pytest.raises(ValueError, match="passes the page end"):
        slotted.insert(full, 1, b"y")
    with pytest.raises(BufferError):
        slotted.insert(bytes(page), 0, b"x")  # a read-only page cannot be edited


def test_damaged_runs_are_refused_and_change_nothing():
    page = bytearray(PAGE_SIZE)
    slotted.format_slotted(page)
    paste_run(page, run_payload(0, [b"abc", b"de"]))
    before = bytes(page)
    good = run_payload(0, [b"abc", b"de"])
    for run, match in ((good[:3], "no header"), (good[:-1], "ends inside record 1"),
                       (good + b"x", "1 bytes past its end"), (run_payload(3, [b"z"]), "outside 0..2")):
        with pytest.raises(ValueError, match=match):
            paste_run(page, run)
        assert page == before
    for run, match in ((good[:-1], "ends inside record 1"), (run_payload(1, [b"de", b"f"]), "beyond 2"),
                       (run_payload(0, [b"abc", b"dx"]), "slot 1 does not hold")):
        with pytest.raises(ValueError, match=match):
            cut_run(page, run)
        assert page == before
    assert slotted.records(page) == [b"abc", b"de"]
    bad = bytearray(page)
    struct.pack_into("<HH", bad, slotted.DIR_START, PAGE_SIZE - 1, 3)  # a body past the end
    with pytest.raises(ValueError, match="passes the page end"):
        slotted.records(bad)
    short = bytearray(page[:20])  # no directory: nothing is read past the buffer
    for op in (lambda: slotted.records(short), lambda: slotted.free_space(short), lambda: slotted.delete(short, 0),
               lambda: slotted.insert(short, 0, b"x"), lambda: paste_run(short, good), lambda: cut_run(short, good),
               lambda: insert_redo(short, b"\0\0x"), lambda: delete_redo(short, b"\0\0"),
               lambda: patch_redo(short, b"\0\0")):
        with pytest.raises(ValueError, match="20 bytes has no directory"):
            op()
    assert short == page[:20]


def test_a_replace_that_does_not_fit_changes_nothing():
    page = bytearray(PAGE_SIZE)
    slotted.format_slotted(page)
    for i, n in enumerate((1500, 1500, 900)):
        slotted.insert(page, i, bytes([i + 1]) * n)
    before = bytes(page)
    with pytest.raises(slotted.PageFull):
        slotted.replace(page, 2, b"z" * 1200)
    assert slotted.records(page) == [b"\1" * 1500, b"\2" * 1500, b"\3" * 900]
    assert slotted.free_space(page) == slotted.free_space(before)

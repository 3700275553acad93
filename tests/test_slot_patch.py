"""Patches: an overwrite by a value of the same length logs only the bytes that changed (the
page record ``OP_SLOT_PATCH`` and the maps' logical undo ``UNDO_PATCH``). The run codec in C
against its definition; a B+tree and a linear hash overwritten, then aborted, rolled back to a
savepoint, and crashed with the overwrite committed or not."""

from __future__ import annotations

import random

import pytest
from conftest import device_snapshot
from hypothesis import given
from hypothesis import strategies as st

from traxfs.ext.slotpage import apply_runs, diff_runs, patch_redo, swap_runs
from traxfs.fs.engine import opcodes, slotted
from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.struct.btree import BTree
from traxfs.fs.struct.linearhash import LinearHash
from traxfs.volume.device import ImageFileDevice

pytestmark = pytest.mark.timeout(120)


@st.composite
def pairs(draw):
    old = draw(st.binary(max_size=600))
    new = bytearray(old)
    for _ in range(draw(st.integers(0, 12))):
        if new:
            i = draw(st.integers(0, len(new) - 1))
            j = min(len(new), i + draw(st.integers(1, 30)))
            new[i:j] = draw(st.binary(min_size=j - i, max_size=j - i))
    return old, bytes(new)


@given(pairs(), st.integers(0, 100))
def test_runs_turn_old_into_new_and_back(pair, base):
    old, new = pair
    runs = diff_runs(old, new, base)
    target = bytearray(base) + bytearray(old)
    apply_runs(target, runs)
    assert bytes(target[base:]) == new
    apply_runs(target, runs, False)
    assert bytes(target[base:]) == old
    apply_runs(target, runs)
    apply_runs(target, swap_runs(runs))
    assert bytes(target[base:]) == old
    assert (runs == b"") == (old == new)
    changed = sum(a != b for a, b in zip(old, new, strict=True))
    assert len(runs) <= 2 * changed + 4 * changed + 2 * 8 * changed  # runs carry changes (and short gaps) only


def _runs_by_definition(old: bytes, new: bytes, base: int) -> bytes:
    """The runs as defined: each a stretch of changed bytes, joined across fewer than 8 equal
    ones, as ``(offset + base u16, length u16, old bytes, new bytes)``."""
    out, i, n = b"", 0, len(old)
    while i < n:
        if old[i] == new[i]:
            i += 1
            continue
        start = end = i
        while i < n:
            if old[i] != new[i]:
                end = i = i + 1
                continue
            same = 0
            while i < n and old[i] == new[i] and same < 8:
                i, same = i + 1, same + 1
            if i >= n or same >= 8:
                break
        out += (base + start).to_bytes(2, "little") + (end - start).to_bytes(2, "little") + old[start:end] + new[start:end]
    return out


@st.composite
def sparse_pairs(draw):
    """Single changed bytes in zeros, a few bytes apart: gaps on both sides of the joining
    length and changes on both sides of 8-byte words."""
    new = bytearray(draw(st.integers(0, 90)))
    at = draw(st.integers(0, 16))
    while at < len(new):
        new[at] = draw(st.integers(1, 255))
        at += draw(st.integers(1, 12))
    return bytes(len(new)), bytes(new)


@given(st.one_of(pairs(), sparse_pairs()), st.integers(0, 100))
def test_runs_are_the_defined_ones(pair, base):
    """The C codec skips equal stretches a word at a time: the runs must not change for it."""
    old, new = pair
    assert diff_runs(old, new, base) == _runs_by_definition(old, new, base)
    assert diff_runs(new, old, base) == _runs_by_definition(new, old, base)


def test_bad_runs_change_nothing():
    old, new = b"abcdefgh" * 4, b"abcdXfgh" * 4
    runs = diff_runs(old, new)
    wrong = bytearray(b"zzzzzzzz" * 4)
    with pytest.raises(ValueError, match="does not hold the logged bytes"):
        apply_runs(wrong, runs)
    assert wrong == b"zzzzzzzz" * 4
    with pytest.raises(ValueError, match="passes the end"):
        apply_runs(bytearray(10), runs)
    with pytest.raises(ValueError, match="inside a run"):
        apply_runs(bytearray(old), runs[:-1])
    with pytest.raises(ValueError, match="equal lengths"):
        diff_runs(b"ab", b"abc")
    page = bytearray(PAGE_SIZE)
    slotted.format_slotted(page)
    slotted.insert(page, 0, old)
    with pytest.raises(ValueError, match="slot 1 outside"):
        patch_redo(page, b"\1\0" + runs)
    with pytest.raises(ValueError, match="no slot index"):
        patch_redo(page, b"\0")
    patch_redo(page, b"\0\0" + runs)
    assert slotted.get(page, 0) == new


def _log_bytes(eng, fn) -> int:
    start = eng.next_lsn()
    fn()
    return eng.next_lsn() - start


@pytest.mark.parametrize("cls", [BTree, LinearHash], ids=["btree", "hash"])
def test_an_overwrite_of_the_same_length_logs_the_change_and_undoes_it(eng, cls, tmp_path):
    rnd = random.Random(5)
    tx = eng.begin()
    m = cls.create(eng, tx, "m")
    values = {b"k%04d" % i: rnd.randbytes(500) for i in range(200)}
    for k, v in values.items():
        m.put(tx, k, v)
    eng.commit(tx)

    def changed(v: bytes) -> bytes:
        return v[:100] + b"12345678" + v[108:]

    tx = eng.begin()
    k = b"k0007"
    cost = _log_bytes(eng, lambda: m.put(tx, k, changed(values[k])))
    grown = _log_bytes(eng, lambda: m.put(tx, b"k0008", values[b"k0008"] + b"!"))  # another length: whole
    if cls is BTree:
        assert cost < 250 < 1000 < grown, (cost, grown)  # before patches: ~1,600 bytes
    else:
        assert cost < grown, (cost, grown)  # the hash logs its page records whole, its undo patched
    assert m.get(k) == changed(values[k])
    eng.abort(tx)
    assert m.get(k) == values[k] and m.get(b"k0008") == values[b"k0008"]

    tx = eng.begin()
    m.put(tx, b"k0001", changed(values[b"k0001"]))
    save = tx.last_lsn
    m.put(tx, b"k0002", changed(values[b"k0002"]))
    m.put(tx, b"k0002", changed(changed(values[b"k0002"])[::-1])[::-1])  # patched twice
    eng.rollback_to(tx, save)
    assert m.get(b"k0002") == values[b"k0002"] and m.get(b"k0001") == changed(values[b"k0001"])
    eng.commit(tx)
    values[b"k0001"] = changed(values[b"k0001"])

    loser = eng.begin()
    m.put(loser, b"k0003", changed(values[b"k0003"]))  # in flight at the crash: undone at open
    device_snapshot(eng, str(tmp_path / "crash.img"))
    eng.abort(loser)
    crashed = Engine.open(ImageFileDevice(str(tmp_path / "crash.img")))
    try:
        m2 = cls.open_named(crashed, "m")
        assert {k: m2.get(k) for k in values} == values
    finally:
        crashed.close()


def test_the_page_record_is_a_patch(eng):
    tx = eng.begin()
    t = BTree.create(eng, tx, "t")
    t.put(tx, b"key", b"a" * 300)
    eng.commit(tx)
    tx = eng.begin()
    t.put(tx, b"key", b"a" * 150 + b"b" + b"a" * 149)
    last = tx.last_lsn
    eng.commit(tx)
    seen = []  # the opcodes of the transaction's records, read back along its chain
    while last:
        rec = eng.log_record(last)
        seen.append(rec.opcode)
        last = rec.prev_lsn
    assert opcodes.OP_SLOT_PATCH in seen and opcodes.OP_SLOT_REPLACE not in seen

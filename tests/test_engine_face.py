"""The engine's public face: recovery and operations nobody registered, savepoints, log barriers,
"make everything so far durable", raw data pages, and the allocation maps of a grown engine."""

from __future__ import annotations

import hashlib
import struct
import threading
import time
from pathlib import Path

import pytest
from conftest import MiB, new_engine
from kvpages import KV

from traxfs.fs.engine import opcodes
from traxfs.fs.engine.check import allocated_pages, check_engine
from traxfs.fs.engine.engine import BITS_PER_MAP, Engine
from traxfs.fs.engine.logmanager import GroupCommitPolicy, LogClosed
from traxfs.fs.engine.opcodes import Operation, UnknownOperation
from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.engine.resize import grow
from traxfs.volume.device import ImageFileDevice

pytestmark = pytest.mark.timeout(60)
OP_TEST = 250  # operations of a "structure" that a later open does not load: a page write ...
OP_TEST_UNDO = 251  # ... and a logical undo (closing a nested top action)
U64 = struct.Struct("<Q")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def test_op(monkeypatch):
    """Register OP_TEST (an 8-byte write, undone by the engine's OP_WRITE) and OP_TEST_UNDO (its
    logical undo sets KV cell 3 back to 0); ``load(False)`` unregisters them, as a process that
    never imported their module has them."""
    write = opcodes.REGISTRY[opcodes.OP_WRITE]
    ops = [Operation(OP_TEST, "test_write", write.redo, write.undo),
           Operation(OP_TEST_UNDO, "test_undo", logical_undo=lambda engine, tx, payload: KV(engine, 10).put(tx, 3, 0))]

    def load(loaded: bool) -> None:
        for op in ops:
            if loaded:
                monkeypatch.setitem(opcodes.REGISTRY, op.opcode, op)
            else:
                monkeypatch.delitem(opcodes.REGISTRY, op.opcode, raising=False)

    load(True)
    return load


def _test_write(eng: Engine, kv: KV, tx, k: int, value: int) -> None:
    pid, off = kv._where(k)
    with eng.page(pid) as f:
        old = bytes(f.data[off : off + 8])
    eng.update(tx, pid, OP_TEST, opcodes.write_payload(off, old, U64.pack(value)))


@pytest.mark.parametrize("case", ["loser", "loser begun before the checkpoint", "committed",
                                  "loser with a logical undo"])
def test_recovery_refuses_an_operation_nobody_registered_and_changes_nothing(tmp_path, test_op, case):
    path = tmp_path / "e.img"
    eng = new_engine(str(path))
    kv = KV(eng, 10)
    tx = eng.begin()
    opcode = OP_TEST
    if case == "loser with a logical undo":  # a page write the engine knows, in an action only OP_TEST_UNDO undoes
        opcode = OP_TEST_UNDO
        nta = eng.nta_begin(tx)
        kv.put(tx, 3, 7)
        eng.nta_end(nta, OP_TEST_UNDO, b"")
    else:
        _test_write(eng, kv, tx, 3, 7)
    if case == "loser begun before the checkpoint":
        eng.checkpoint()  # the record now lies before the checkpoint, its page written back
    if case == "committed":
        eng.commit(tx)
    eng.make_durable()
    eng.unclean_shutdown()
    eng.dev.close()

    test_op(False)
    before = _sha(path)
    with ImageFileDevice(str(path)) as dev:
        with pytest.raises(UnknownOperation, match=rf"{path}: log record \d+ uses opcode {opcode} \(unknown: "
                                                   r"the structure that wrote it is not loaded\)"):
            Engine.open(dev, name=str(path))
    assert _sha(path) == before  # refused before a page was redone or a record appended

    test_op(True)  # the module loaded: recovery runs
    with ImageFileDevice(str(path)) as dev:
        eng = Engine.open(dev)
        assert KV(eng, 10).get(3) == (7 if case == "committed" else 0)
        assert eng.recovery.losers == ([] if case == "committed" else [tx.xid])
        eng.close()


def test_rollback_to_a_savepoint_keeps_what_came_before(eng):
    kv = KV(eng, 10)
    tx = eng.begin()
    kv.put(tx, 1, 11)
    savepoint = tx.last_lsn
    kv.put(tx, 2, 22)
    kv.put(tx, 1, 12)
    eng.rollback_to(tx, savepoint)
    assert (kv.get(1), kv.get(2)) == (11, 0)
    kv.put(tx, 3, 33)  # the transaction goes on
    eng.commit(tx)
    eng.unclean_shutdown()
    again = Engine.open(eng.dev)
    kv = KV(again, 10)
    assert (kv.get(1), kv.get(2), kv.get(3)) == (11, 0, 33)
    again.close()


def test_every_log_barrier_runs_before_the_records_are_written(eng):
    kv = KV(eng, 10)
    calls: list[tuple[str, int]] = []

    def barrier(name: str):
        return lambda: calls.append((name, eng.stats()["log"]["durable_lsn"]))

    first, second = barrier("first"), barrier("second")
    eng.add_log_barrier(first)
    eng.add_log_barrier(second)  # added, not replacing the first
    tx = eng.begin()
    kv.put(tx, 1, 1)
    handle = eng.commit(tx)
    assert [name for name, _ in calls][-2:] == ["first", "second"]
    assert all(durable < handle.lsn for _, durable in calls[-2:])  # before the commit record was written
    eng.remove_log_barrier(first)
    calls.clear()
    tx = eng.begin()
    kv.put(tx, 2, 2)
    eng.commit(tx)
    assert [name for name, _ in calls] == ["second"]
    with pytest.raises(ValueError, match="never added"):
        eng.remove_log_barrier(first)


def test_make_durable_returns_when_every_record_so_far_is_on_disk(tmp_path):
    eng = new_engine(str(tmp_path / "e.img"), policy=GroupCommitPolicy(max_commits=1 << 30, max_bytes=1 << 30,
                                                                        max_delay=3600.0))
    kv = KV(eng, 10)
    tx = eng.begin()
    kv.put(tx, 1, 5)
    handle = eng.soft_commit(tx)  # nothing flushes it by itself (an hour's group-commit delay)
    assert not handle.done()
    eng.make_durable()
    assert handle.done()
    tx = eng.begin()
    kv.put(tx, 2, 6)
    handle = eng.soft_commit(tx)
    eng.make_durable(handle.lsn)
    assert handle.done()
    eng.close()
    with pytest.raises(LogClosed):
        eng.make_durable(eng.next_lsn() + 1)


def test_raw_pages_are_the_page_area_and_nothing_else(eng):
    tx = eng.begin()
    first = eng.alloc_region(tx, 4, align=4)
    eng.raw.claim(first, 4)
    eng.commit(tx)
    data = bytes(range(256)) * 32  # two pages
    eng.raw.write(first * PAGE_SIZE + 100, data)
    assert eng.raw.read(first * PAGE_SIZE + 100, len(data)) == data
    assert eng.dev.read(eng.sb.pages_offset + first * PAGE_SIZE + 100, len(data)) == data
    views = [bytearray(10), bytearray(len(data) - 10)]
    eng.raw.readinto(first * PAGE_SIZE + 100, [memoryview(v) for v in views])
    assert b"".join(views) == data
    assert eng.raw.copies(first * PAGE_SIZE, PAGE_SIZE) == [(0, eng.raw.read(first * PAGE_SIZE, PAGE_SIZE))]
    end = eng.page_count * PAGE_SIZE
    for pos, n in ((-1, 10), (end - 10, 11), (end, 1)):
        with pytest.raises(ValueError, match="outside the page area"):
            eng.raw.read(pos, n)
        with pytest.raises(ValueError, match="outside the page area"):
            eng.raw.write(pos, bytes(n))


def test_pages_in_use_and_the_raw_maps_agree_on_a_grown_engine(tmp_path):
    """An engine grown past its first map's range keeps the new maps at the first page of the
    range each covers: both ways of listing allocated pages find them there."""
    path = str(tmp_path / "g.img")
    eng = new_engine(path)
    eng.close()
    eng.dev.close()
    with open(path, "r+b") as f:
        f.truncate(300 * MiB)
    with ImageFileDevice(path) as dev:
        grow(dev)
        eng = Engine.open(dev)
        assert eng.nmaps >= 3 and eng.map_page(2) == 2 * BITS_PER_MAP
        tx = eng.begin()
        far = 2 * BITS_PER_MAP + 1  # in the third map's range, just behind the map itself
        assert eng.alloc_at(tx, far, 8)
        eng.commit(tx)
        in_use = eng.pages_in_use()
        assert {BITS_PER_MAP, 2 * BITS_PER_MAP, far, far + 7} <= set(in_use)
        assert allocated_pages(eng) == (in_use, [])
        assert check_engine(eng) == []
        eng.close()


def test_barriers_may_be_added_while_the_log_flushes(eng):
    """The list is replaced whole under the log's lock: a flusher never sees half a change."""
    kv = KV(eng, 50)
    stop = threading.Event()

    def churn() -> None:
        fns = [lambda: None for _ in range(8)]
        while not stop.is_set():
            for fn in fns:
                eng.add_log_barrier(fn)
            for fn in fns:
                eng.remove_log_barrier(fn)

    t = threading.Thread(target=churn)
    t.start()
    try:
        for i in range(200):
            tx = eng.begin()
            kv.put(tx, i % 50, i)
            eng.commit(tx)
    finally:
        stop.set()
        t.join()
    assert kv.get(199 % 50) == 199


class _HeldWrites(ImageFileDevice):
    """An image file whose writes touching ``[lo, hi)`` wait for ``go`` (a slow disk under one
    write-back), so a test can act while that write is in flight."""

    def __init__(self, path: str):
        super().__init__(path)
        self.lo = self.hi = 0
        self.entered, self.go = threading.Event(), threading.Event()
        self.done_at: float | None = None

    def write(self, offset: int, data) -> None:
        held = offset < self.hi and offset + len(data) > self.lo
        if held:
            self.entered.set()
            self.go.wait(10)
        super().write(offset, data)
        if held:
            self.done_at = time.monotonic()


def test_claiming_a_freed_page_waits_for_its_write_back_in_flight(tmp_path):
    """A structure page freed while dirty is written back by a checkpoint that pins it; the page
    is reusable at once, and a new owner claiming it for raw bytes must wait for that write
    (raising, as it did, failed the owner's append; not waiting would let the page's old image
    land over the raw bytes)."""
    path = str(tmp_path / "e.img")
    new_engine(path).close()
    dev = _HeldWrites(path)
    eng = Engine.open(dev)
    kv = KV(eng, 10)
    pid = kv._where(0)[0]
    tx = eng.begin()
    kv.put(tx, 0, 42)  # the page is dirty ...
    eng.free_page(tx, pid)  # ... and freed
    eng.commit(tx)
    dev.lo = eng.sb.pages_offset + pid * PAGE_SIZE
    dev.hi = dev.lo + PAGE_SIZE
    writer = threading.Thread(target=eng.write_back)
    writer.start()
    assert dev.entered.wait(10)  # the checkpoint holds the page pinned, its write in flight
    tx = eng.begin()
    assert eng.alloc_at(tx, pid, 1)
    threading.Timer(0.2, dev.go.set).start()
    eng.raw.claim(pid, 1)
    claimed_at = time.monotonic()
    assert dev.done_at is not None and dev.done_at <= claimed_at
    data = b"raw bytes".ljust(PAGE_SIZE, b".")
    eng.raw.write(pid * PAGE_SIZE, data)
    eng.commit(tx)
    writer.join(10)
    eng.write_back()
    assert eng.raw.read(pid * PAGE_SIZE, PAGE_SIZE) == data
    eng.close()

"""The transactional engine: commit, abort, recovery, checkpoints, group commit, bad input."""

from __future__ import annotations

import threading

import pytest
from conftest import reopen_engine
from kvpages import KV

from traxfs.fs.engine import opcodes
from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.logmanager import GroupCommitPolicy
from traxfs.fs.engine.logrecord import MAX_PAYLOAD
from traxfs.fs.engine.opcodes import UnknownOperation
from traxfs.fs.engine.page import PageCorrupt
from traxfs.fs.engine.superblock import SuperblockError
from traxfs.fs.engine.xact import TransactionError
from traxfs.volume.device import create_image

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["cd", "mutex"])
def engine(engine_dev, request):
    eng = Engine.open(engine_dev, log_buffer=request.param)
    yield eng
    if not eng.closed:
        eng.close()


@pytest.mark.parametrize("crash", [False, True])
def test_committed_survive_aborted_and_unfinished_do_not(engine, crash):
    kv = KV(engine, 100)
    t1 = engine.begin()
    for k in range(10):
        kv.put(t1, k, 100 + k)
    engine.commit(t1)
    t2 = engine.begin()
    kv.put(t2, 0, 999)
    kv.put(t2, 50, 999)
    engine.abort(t2)
    assert kv.get(0) == 100 and kv.get(50) == 0
    t3 = engine.begin()  # never finishes
    kv.put(t3, 1, 777)
    kv.put(t3, 60, 777)
    engine.log.flush_all()
    engine.buffer.write_back()  # the loser's changes reach the device: undo must remove them
    t3.pre_commit.clear()
    if not crash:
        engine.abort(t3)
    eng = reopen_engine(engine, crash)
    kv = KV(eng, 100)
    assert [kv.get(k) for k in range(10)] == [100 + k for k in range(10)]
    assert kv.get(50) == 0 and kv.get(60) == 0
    assert eng.recovery.losers == ([t3.xid] if crash else [])
    eng.close()


def test_soft_commit_becomes_durable_when_waited(engine):
    kv = KV(engine, 10)
    tx = engine.begin()
    kv.put(tx, 3, 33)
    handle = engine.soft_commit(tx)
    assert handle.wait(5)
    eng = reopen_engine(engine, crash=True)
    assert KV(eng, 10).get(3) == 33
    eng.close()


def test_recovery_survives_a_crash_during_recovery(engine):
    kv = KV(engine, 50)
    tx = engine.begin()
    for k in range(50):
        kv.put(tx, k, 5)
    engine.log.flush_all()
    engine.buffer.write_back()
    engine.unclean_shutdown()
    # the first recovery writes CLRs, then "crashes" before finishing cleanly
    eng = Engine.open(engine.dev)
    assert eng.recovery.undone >= 50
    eng.unclean_shutdown()
    eng = Engine.open(engine.dev)
    assert eng.recovery.losers == []  # the first recovery's END record finished the loser
    kv = KV(eng, 50)
    assert all(kv.get(k) == 0 for k in range(50))
    eng.close()


def test_many_threads_group_commit_lose_nothing(engine_dev):
    eng = Engine.open(engine_dev, policy=GroupCommitPolicy(max_commits=8, max_delay=0.002))
    kv = KV(eng, 800)
    acked: dict[int, int] = {}
    lock = threading.Lock()

    def worker(w: int) -> None:
        for i in range(60):
            tx = eng.begin()
            k = w * 100 + i
            kv.put(tx, k, 1000 * w + i + 1)
            eng.commit(tx)
            with lock:
                acked[k] = 1000 * w + i + 1

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = eng.stats()["log"]
    assert stats["flushes"] < stats["commits"]  # commits were grouped
    eng.unclean_shutdown()
    eng = Engine.open(engine_dev)
    kv = KV(eng, 800)
    assert {k: kv.get(k) for k in acked} == acked
    eng.close()


def test_checkpoint_truncates_and_log_wraps(engine_dev):
    eng = Engine.open(engine_dev)
    kv = KV(eng, 10)
    for round_ in range(300):  # ~ several times the 4 MiB log with page images
        tx = eng.begin()
        kv.put(tx, round_ % 10, round_)
        eng.update(tx, kv.base, opcodes.OP_WRITE, opcodes.write_payload(2000, bytes(2000), bytes(2000)))
        eng.commit(tx)
        if round_ % 50 == 0:
            eng.checkpoint()
    assert eng.log.reserved() > 4 << 20 or eng.log.trunc_lsn > 4096
    eng = reopen_engine(eng, crash=True)
    kv = KV(eng, 10)
    assert [kv.get(k) for k in range(10)] == [290 + k for k in range(10)]
    eng.close()


def test_bad_input_is_refused_and_changes_nothing(engine):
    kv = KV(engine, 10)
    tx = engine.begin()
    before = engine.log.reserved()
    with pytest.raises(UnknownOperation, match="opcode 4242"):
        engine.update(tx, kv.base, 4242, b"x")
    with pytest.raises(ValueError, match="exceeds the limit"):
        engine.log.append(1, payload=bytes(MAX_PAYLOAD + 1))
    with pytest.raises(ValueError):
        engine.update(tx, kv.base, opcodes.OP_WRITE, b"\x00\x00\x10\x00")  # range inside the header
    with pytest.raises(ValueError, match="outside the page file"):
        engine.update(tx, 10**9, opcodes.OP_WRITE, opcodes.write_payload(100, b"a", b"b"))
    with pytest.raises(ValueError):
        engine.update(tx, kv.base, opcodes.OP_SLOT_DELETE, opcodes.slot_delete_payload(7, b""))  # no slot 7
    with pytest.raises(ValueError, match="OP_ADD"):
        engine.update(tx, kv.base, opcodes.OP_ADD, b"\x10\x00" + bytes(8))  # offset 16: inside the header
    with pytest.raises(ValueError, match="OP_ADD"):
        engine.update(tx, kv.base, opcodes.OP_ADD, bytes(3))
    with pytest.raises(ValueError, match="OP_ADD"):
        opcodes.add_payload(4090, 1)
    assert engine.log.reserved() == before
    engine.commit(tx)
    with pytest.raises(TransactionError):
        engine.commit(tx)


def test_a_refused_operation_leaves_the_page_and_the_log_as_they_were(engine, monkeypatch):
    """The redo runs on a copy of the page: one that changes some bytes and then refuses (or
    changes the page's size) leaves the page and the log untouched, as does an operation with no
    page redo or a transaction that is not active."""
    kv = KV(engine, 10)
    tx = engine.begin()
    kv.put(tx, 1, 7)  # the page is dirty and in the log: no first-change image from here on

    def scribble_then_refuse(page, payload):
        page[100:200] = b"\xee" * 100
        raise ValueError("refused after scribbling")

    def shrink(page, payload):
        del page[-1:]

    monkeypatch.setitem(opcodes.REGISTRY, 240, opcodes.Operation(240, "scribble", scribble_then_refuse))
    monkeypatch.setitem(opcodes.REGISTRY, 241, opcodes.Operation(241, "shrink", shrink))
    monkeypatch.setitem(opcodes.REGISTRY, 242, opcodes.Operation(242, "logical only"))
    with engine.page(kv.base) as f:
        page = bytes(f.data)
    before, last = engine.log.reserved(), tx.last_lsn
    with pytest.raises(ValueError, match="refused after scribbling"):
        engine.update(tx, kv.base, 240, b"x")
    with pytest.raises(ValueError, match="changed the page size"):
        engine.update(tx, kv.base, 241, b"x")
    with pytest.raises(ValueError, match="has no page redo"):
        engine.update(tx, kv.base, 242, b"x")
    with engine.page(kv.base) as f:
        assert bytes(f.data) == page
    assert (engine.log.reserved(), tx.last_lsn) == (before, last)
    engine.commit(tx)
    with pytest.raises(TransactionError, match="not active"):
        engine.update(tx, kv.base, opcodes.OP_WRITE, opcodes.write_payload(100, page[100:101], b"z"))
    assert engine.log.reserved() > before  # the commit only
    with engine.page(kv.base) as f:
        assert bytes(f.data) == page


def test_damaged_superblock_and_foreign_device(tmp_path, engine_dev):
    for off in (0, 4096):  # one copy damaged: the other is used
        raw = bytearray(engine_dev.read(off, 512))
        raw[40] ^= 0xFF
        engine_dev.write(off, raw)
        Engine.open(engine_dev).close()
        engine_dev.write(off, bytes(raw[:40]) + bytes([raw[40] ^ 0xFF]) + bytes(raw[41:]))
    for off in (0, 4096):
        raw = bytearray(engine_dev.read(off, 512))
        raw[40] ^= 0xFF
        engine_dev.write(off, raw)
    with pytest.raises(SuperblockError, match="copy 0: superblock checksum mismatch.*copy 1"):
        Engine.open(engine_dev)
    blank = create_image(str(tmp_path / "blank.img"), 16 << 20)
    with pytest.raises(SuperblockError, match="no traxfs engine superblock"):
        Engine.open(blank)


def test_corrupted_page_is_named(engine):
    kv = KV(engine, 10)
    tx = engine.begin()
    kv.put(tx, 1, 1)
    engine.commit(tx)
    engine.close()
    off = engine.sb.pages_offset + kv.base * 4096 + 100
    engine.dev.write(off, b"\xff")
    eng = Engine.open(engine.dev)
    with pytest.raises(PageCorrupt, match=f"page {kv.base}: checksum mismatch"):
        KV(eng, 10).get(1)
    eng.close()


def test_corrupted_log_tail_ends_the_log_and_is_reported(engine):
    kv = KV(engine, 10)
    tx = engine.begin()
    kv.put(tx, 1, 11)
    engine.commit(tx)
    tx = engine.begin()
    kv.put(tx, 2, 22)
    engine.commit(tx)
    engine.log.flush_all()
    last = engine.log.durable_lsn
    engine.unclean_shutdown()
    # damage the last record of the log: the second transaction's COMMIT record
    store = engine.store
    store.write(last - 8, b"\xde\xad\xbe\xef\xde\xad\xbe\xef")
    store.sync()
    eng = Engine.open(engine.dev)
    assert "checksum mismatch" in eng.recovery.log_end  # reported, and where
    kv = KV(eng, 10)
    assert kv.get(1) == 11 and kv.get(2) == 0  # a damaged commit record means: not committed
    eng.close()


@pytest.mark.parametrize("crash", [False, True])
def test_increment_commits_aborts_wraps_and_recovers(engine, crash):
    """OP_ADD (Stasis' Tincrement): a committed delta stays, an aborted one is undone by the
    negated delta, arithmetic wraps mod 2**64, and recovery repeats exactly the committed ones."""
    kv = KV(engine, 10)
    tx = engine.begin()
    kv.add(tx, 1, 5)
    kv.add(tx, 2, -1)  # 0 - 1 wraps
    kv.add(tx, 3, -(1 << 63))
    engine.commit(tx)
    tx = engine.begin()
    kv.add(tx, 1, 100)
    kv.add(tx, 3, -(1 << 63))  # its undo is the same delta: -2**63 has no positive counterpart
    engine.abort(tx)
    assert (kv.get(1), kv.get(2), kv.get(3)) == (5, (1 << 64) - 1, 1 << 63)
    loser = engine.begin()
    kv.add(loser, 1, 7)
    engine.log.flush_all()
    engine.buffer.write_back()  # the loser's delta reaches the device: undo must take it back
    if not crash:
        engine.abort(loser)
    eng = reopen_engine(engine, crash)
    kv = KV(eng, 10)
    assert (kv.get(1), kv.get(2), kv.get(3)) == (5, (1 << 64) - 1, 1 << 63)
    eng.close()


def test_concurrent_increments_of_one_cell_commute_through_aborts(engine_dev):
    """Threads add to one shared cell without a lock, some aborting: each abort subtracts only
    its own delta, so the cell ends at the sum of the committed deltas, after a crash too."""
    eng = Engine.open(engine_dev, policy=GroupCommitPolicy(max_commits=4, max_delay=0.001))
    kv = KV(eng, 10)
    committed = [0] * 6

    def worker(w: int) -> None:
        for i in range(60):
            tx = eng.begin()
            delta = w * 1000 + i + 1
            kv.add(tx, 0, delta)
            kv.add(tx, 0, 1)
            if i % 4 == 3:
                eng.abort(tx)
            else:
                eng.commit(tx)
                committed[w] += delta + 1

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert kv.get(0) == sum(committed)
    eng = reopen_engine(eng, crash=True)
    assert KV(eng, 10).get(0) == sum(committed)
    eng.close()


@pytest.mark.timeout(60)
def test_a_durability_callback_never_waits_for_an_allocation(engine_dev):
    """A free that waits for durability is released by whichever thread makes the commit
    durable — here one holding an allocation map's latch while it forces the log (as a
    checkpoint writing the page back does). An allocation searching that map under the
    allocator's lock waits for the latch; the release must not wait for the allocator's lock."""
    eng = Engine.open(engine_dev, policy=GroupCommitPolicy(max_commits=1 << 30, max_bytes=1 << 30, max_delay=60))
    try:
        tx = eng.begin()
        first = eng.alloc.alloc_region(tx, 8)
        eng.commit(tx)
        tx = eng.begin()
        eng.alloc.free_region(tx, first, 8)
        eng.soft_commit(tx)  # its durability (and the release) waits for a flush nobody asks for yet
        got: list[int] = []
        with eng.page(eng.map_page(0)):
            t = threading.Thread(target=lambda: got.append(eng.alloc.alloc_region(eng.begin(), 4)), daemon=True)
            t.start()
            t.join(0.3)  # the allocation now holds the allocator's lock and waits for this latch
            assert t.is_alive()
            done = threading.Event()
            threading.Thread(target=lambda: (eng.log.force(eng.log.reserved()), done.set()), daemon=True).start()
            assert done.wait(10), "the release deadlocked against the allocation"
        t.join(10)
        assert got and not t.is_alive()
    finally:
        eng.unclean_shutdown()

"""Records: read / set / size through one layout interface on slotted and fixed pages, and the
record allocator (alloc / dealloc) — stable ids, frees only at commit, reuse only after the
freeing commit is in the log, per-transaction pages, crashes and concurrent aborts."""

from __future__ import annotations

import random
import threading
import time

import pytest
from conftest import reopen_engine

from traxfs.fs.engine import opcodes, slotted
from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.logmanager import GroupCommitPolicy
from traxfs.fs.engine.page import PAGE_SIZE, PageType
from traxfs.fs.engine.record_store import RecordError, RecordId, read_record, record_size, set_record

pytestmark = pytest.mark.timeout(120)


def test_one_interface_for_slotted_and_fixed_pages(engine_dev):
    eng = Engine.open(engine_dev)
    tx = eng.begin()
    sp = eng.alloc.alloc_page(tx)  # slotted
    eng.update(tx, sp, opcodes.OP_SLOT_INSERT, opcodes.slot_insert_payload(0, b"hello"))
    fp = eng.alloc.alloc_page(tx, PageType.FIXED, 16, b"")
    eng.commit(tx)
    srid, frid = RecordId(sp, 0, 5), RecordId(fp, 3, 16)
    assert read_record(eng, srid) == b"hello" and record_size(eng, srid) == 5
    assert read_record(eng, frid) == bytes(16) and record_size(eng, frid) == 16
    tx = eng.begin()
    set_record(eng, tx, srid, b"HELLO")
    set_record(eng, tx, frid, b"f" * 16)
    eng.commit(tx)
    tx = eng.begin()
    set_record(eng, tx, srid, b"xxxxx")
    eng.abort(tx)
    eng = reopen_engine(eng, crash=True)
    assert read_record(eng, srid) == b"HELLO" and read_record(eng, frid) == b"f" * 16
    eng.close()


def test_bad_addresses_and_sizes_are_refused_and_change_nothing(engine_dev):
    eng = Engine.open(engine_dev)
    tx = eng.begin()
    rid = eng.records.alloc(tx, 4, b"abcd")
    fp = eng.alloc.alloc_page(tx, PageType.FIXED, 100, b"")
    before = eng.log.reserved()
    with pytest.raises(RecordError, match="holds 4 bytes"):
        set_record(eng, tx, rid, b"abc")
    with pytest.raises(RecordError, match="outside the page's 1 slots"):
        read_record(eng, RecordId(rid.page, 1, 4))
    with pytest.raises(RecordError, match=f"outside the page's {(PAGE_SIZE - 32) // 100} records"):
        read_record(eng, RecordId(fp, 40, 100))
    with pytest.raises(RecordError, match="type 6"):  # an allocation map
        read_record(eng, RecordId(1, 0, 8))
    with pytest.raises(RecordError, match="must be 1.."):
        eng.records.alloc(tx, 0)
    with pytest.raises(RecordError, match="must be 1.."):
        eng.records.alloc(tx, slotted.MAX_RECORD + 1)
    with pytest.raises(RecordError, match="must be 1.."):
        eng.records.alloc(tx, 3, b"four")
    assert eng.log.reserved() == before
    eng.records.dealloc(tx, rid)
    with pytest.raises(RecordError, match="already freed"):
        eng.records.dealloc(tx, rid)
    eng.commit(tx)
    with pytest.raises(RecordError, match="is free"):
        read_record(eng, rid)
    eng.close()


@pytest.mark.parametrize("crash", [False, True])
def test_alloc_commit_abort_and_recovery(engine_dev, crash):
    eng = Engine.open(engine_dev)
    tx = eng.begin()
    kept = [eng.records.alloc(tx, 10 + i, bytes([i]) * (10 + i)) for i in range(50)]
    eng.commit(tx)
    tx = eng.begin()
    lost = [eng.records.alloc(tx, 30, b"L" * 30) for _ in range(200)]  # spills onto new pages
    eng.abort(tx)
    tx = eng.begin()
    kept.append(eng.records.alloc(tx, 7, b"seventh"))
    eng.commit(tx)
    eng = reopen_engine(eng, crash)
    assert [read_record(eng, r) for r in kept[:50]] == [bytes([i]) * (10 + i) for i in range(50)]
    assert read_record(eng, kept[50]) == b"seventh"
    taken = {(r.page, r.slot) for r in kept}
    for r in lost:  # every aborted append was undone: its slot is gone, unless a later record took it
        if (r.page, r.slot) not in taken:
            with pytest.raises(RecordError):  # "outside the page's slots", or a page freed again
                read_record(eng, r)
    eng.close()


def test_a_freed_slot_is_reused_only_after_the_freeing_commit(engine_dev):
    eng = Engine.open(engine_dev)
    tx = eng.begin()
    rid = eng.records.alloc(tx, 8, b"original")
    eng.commit(tx)
    t1 = eng.begin()
    eng.records.dealloc(t1, rid)
    assert read_record(eng, rid) == b"original"  # not freed before commit
    seen = []

    def probe(_t):  # runs after the free's hook emptied the slot, before the commit record
        t2 = eng.begin()
        other = eng.records.alloc(t2, 8, b"newcomer")
        seen.append(other)
        eng.commit(t2)

    t1.pre_commit.append(probe)
    eng.commit(t1)
    assert seen and (seen[0].page, seen[0].slot) != (rid.page, rid.slot)
    t3 = eng.begin()
    again = eng.records.alloc(t3, 8, b"reuse-it")
    eng.commit(t3)
    assert (again.page, again.slot) == (rid.page, rid.slot)  # free now: reused in place
    eng = reopen_engine(eng, crash=True)
    assert read_record(eng, again) == b"reuse-it" and read_record(eng, seen[0]) == b"newcomer"
    eng.close()


def test_aborted_dealloc_keeps_the_record_and_aborted_reuse_frees_it_again(engine_dev):
    eng = Engine.open(engine_dev)
    tx = eng.begin()
    a, b = eng.records.alloc(tx, 4, b"aaaa"), eng.records.alloc(tx, 4, b"bbbb")
    eng.commit(tx)
    tx = eng.begin()
    eng.records.dealloc(tx, a)
    eng.abort(tx)
    assert read_record(eng, a) == b"aaaa"
    tx = eng.begin()
    eng.records.dealloc(tx, b)
    eng.commit(tx)
    tx = eng.begin()
    c = eng.records.alloc(tx, 4, b"cccc")
    assert (c.page, c.slot) == (b.page, b.slot)
    eng.abort(tx)
    assert record_size(eng, b) == 0
    tx = eng.begin()
    d = eng.records.alloc(tx, 4, b"dddd")
    eng.commit(tx)
    assert (d.page, d.slot) == (b.page, b.slot) and read_record(eng, d) == b"dddd"
    eng.close()


def test_page_frees_are_quarantined_until_the_commit_is_durable(engine_dev):
    """The same rule for pages: freed bits are cleared just before the commit record, and the
    pages are not handed out again until that record is on disk (a durable commit: at once)."""
    eng = Engine.open(engine_dev)
    tx = eng.begin()
    pid = eng.alloc.alloc_page(tx)
    eng.commit(tx)
    t1 = eng.begin()
    eng.alloc.free_page(t1, pid)
    during = []
    t1.pre_commit.append(lambda _t: during.append(eng.alloc.quarantined_pages()))
    eng.commit(t1)
    assert during == [1] and eng.alloc.quarantined_pages() == 0
    eng.close()


def test_a_search_skips_quarantined_pages_and_finds_them_once_durable(engine_dev):
    """Runs freed by a commit not yet durable are passed over by every search, whatever the
    cursor (a run starting inside one, or covering one of several); once the commit is durable
    the same search hands them out again."""
    eng = Engine.open(engine_dev, policy=GroupCommitPolicy(max_commits=1 << 30, max_bytes=1 << 30, max_delay=60))
    tx = eng.begin()
    runs = [eng.alloc.alloc_region(tx, 8) for _ in range(6)]
    eng.commit(tx)
    tx = eng.begin()
    for first in runs[1::2]:
        eng.alloc.free_region(tx, first, 8)
    end = eng.soft_commit(tx).lsn  # not durable: nobody forces for a minute
    freed = {p for first in runs[1::2] for p in range(first, first + 8)}
    tx = eng.begin()
    for start, count in ((runs[0], 8), (runs[1], 1), (runs[1] + 3, 2), (runs[0], 24), (runs[0] + 4, 16)):
        eng.alloc._cursor = start
        got = eng.alloc.alloc_region(tx, count)
        assert freed.isdisjoint(range(got, got + count)), (start, count, got)
    eng.abort(tx)
    eng.log.force(end)
    assert eng.alloc.quarantined_pages() == 0
    tx = eng.begin()
    eng.alloc._cursor = runs[1]
    assert eng.alloc.alloc_region(tx, 8) == runs[1]
    eng.commit(tx)
    eng.close()


def test_a_release_at_durability_never_waits_for_the_allocator(engine_dev):
    """A freed region becomes reusable from the thread that makes its commit durable, and that
    thread may hold a page latch (a checkpoint seals a bitmap page and forces the log) that an
    allocator holding its own lock waits for: the release must not take that lock."""
    eng = Engine.open(engine_dev, policy=GroupCommitPolicy(max_commits=1 << 30, max_bytes=1 << 30, max_delay=60))
    tx = eng.begin()
    first = eng.alloc.alloc_region(tx, 8)
    eng.commit(tx)
    tx = eng.begin()
    eng.alloc.free_region(tx, first, 8)
    end = eng.soft_commit(tx).lsn  # not durable yet: the daemon waits a minute, nobody forces
    map_pid = 1 + first // eng.alloc.bits_per_map
    latched, forced, allocated = threading.Event(), threading.Event(), threading.Event()

    def allocator() -> None:
        with eng.alloc._lock:
            latched.wait(5)
            with eng.page(map_pid):  # waits for the latch the forcing thread holds
                allocated.set()

    def checkpointer() -> None:  # as a checkpoint sealing the bitmap page: latch held, log forced
        with eng.page(map_pid):
            latched.set()
            time.sleep(0.1)  # the allocator holds its lock and waits for this latch by now
            eng.log.force(end)  # this thread leads the flush and runs the release
        forced.set()

    threads = [threading.Thread(target=fn, daemon=True) for fn in (allocator, checkpointer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert forced.is_set() and allocated.is_set(), "deadlock: the release waited for the allocator's lock"
    assert eng.alloc.quarantined_pages() == 0
    eng.close()


@pytest.mark.parametrize("seed", range(2))
def test_concurrent_alloc_dealloc_with_aborts_survive_a_crash(engine_dev, seed):
    """Threads allocate, overwrite and free records, a quarter of their transactions aborting:
    afterwards, and after a crash, every committed live record holds its last committed bytes,
    and no two live records share a slot."""
    eng = Engine.open(engine_dev)
    live: dict[tuple[int, int], bytes] = {}
    lock = threading.Lock()

    def worker(w: int) -> None:
        rng = random.Random(seed * 10 + w)
        mine: list[RecordId] = []
        for _ in range(80):
            tx = eng.begin()
            made = [eng.records.alloc(tx, n, bytes([w]) * n) for n in (rng.randint(1, 300) for _ in range(3))]
            gone = rng.sample(mine, min(len(mine), rng.randint(0, 2)))
            for r in gone:
                eng.records.dealloc(tx, r)
            changed = {}
            for r in rng.sample(mine, min(len(mine), 1)):
                if r not in gone:
                    changed[r] = rng.randbytes(r.size)
                    set_record(eng, tx, r, changed[r])
            if rng.random() < 0.25:
                eng.abort(tx)
                continue
            with lock:  # before the commit: once it is in, another thread may get these slots
                for r in gone:
                    del live[(r.page, r.slot)]
            eng.commit(tx)
            with lock:
                for r in made:
                    assert (r.page, r.slot) not in live, f"slot {r.page}/{r.slot} handed out twice"
                    live[(r.page, r.slot)] = bytes([w]) * r.size
                for r, data in changed.items():
                    live[(r.page, r.slot)] = data
            mine = [r for r in mine if r not in gone] + made

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for crash in (False, True):
        for (pid, slot), data in live.items():
            assert read_record(eng, RecordId(pid, slot, len(data))) == data
        eng = reopen_engine(eng, crash)
    eng.close()


def test_free_slots_too_small_do_not_block_reuse_elsewhere(engine_dev):
    """An allocation tries free slots on FREE_PAGES_TRIED pages; those without room go to the
    back, so a later allocation reaches a page with room behind more than that many full ones."""
    from traxfs.fs.engine.record_store import FREE_PAGES_TRIED

    eng = Engine.open(engine_dev)
    pages = []
    for _ in range(FREE_PAGES_TRIED + 3):  # each transaction fills a page of its own
        tx = eng.begin()
        pages.append([eng.records.alloc(tx, 1000, b"x" * 1000) for _ in range(4)])
        eng.commit(tx)
    tx = eng.begin()
    for recs in pages[:-1]:
        eng.records.dealloc(tx, recs[0])  # 1,044 bytes free on each of these pages
    eng.records.dealloc(tx, pages[-1][1])
    eng.records.dealloc(tx, pages[-1][2])  # 2,044 free on the last: a 2,042-byte record fits
    eng.commit(tx)  # only into one of its free slots (a new slot would need 4 bytes more)
    tx = eng.begin()
    first = eng.records.alloc(tx, 2042, b"A" * 2042)  # the first 8 pages have no room: a new page
    second = eng.records.alloc(tx, 2042, b"B" * 2042)
    eng.commit(tx)
    assert first.page not in {r.page for recs in pages for r in recs}
    assert (second.page, second.slot) in {(pages[-1][1].page, 1), (pages[-1][2].page, 2)}
    assert read_record(eng, second) == b"B" * 2042 and read_record(eng, first) == b"A" * 2042
    eng.close()

"""The queue store on an engine over an image file, without FUSE (fs/queues).

A hypothesis state machine drives appends (batches of lines written in pieces, partial lines
completed by later writes), refused writes, fsyncs, views (create, commit, seek, remove),
retention by count with reclaim, clean reopens and crashes against a model: every view reads
exactly the model's records from its head, in order; every segment holds exactly its records;
after a crash every synced record is there, what survived of the rest is whole batches in order,
and no sequence number is ever handed out twice.
"""

from __future__ import annotations

import errno
import os
import tempfile

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from queue_model import close_store, new_image, open_store, read_from, read_segment

from traxfs.ext.linescan import scan_lines
from traxfs.fs.errors import FsError
from traxfs.fs.queues.config import QueueConfig
from traxfs.fs.queues.producer import Producer
from traxfs.fs.queues.reader import Reader
from traxfs.fs.queues.status import queue_status

SMALL = QueueConfig(block_size=16384, retain_age_seconds=None, seal_bytes=3000, max_record_bytes=40000)


def line(n: int, size: int) -> bytes:
    head = f"r{n}:".encode()
    return head + b"x" * max(0, size - len(head) - 1) + b"\n"


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="qsm-")
        self.path = os.path.join(self.dir, "e.img")
        new_image(self.path)
        self.eng, self.store = open_store(self.path)
        self.q = self.store.create(b"q", SMALL)
        self.all: dict[int, bytes] = {}  # every record ever appended: seq -> line
        self.order: list[int] = []  # sequence numbers of the retained model, in order
        self.synced = 0  # records below this sequence number are durable
        self.bounds: set[int] = set()  # where batches began
        self.heads: dict[bytes, int] = {}
        self.issued = 0  # every sequence number handed out is below this
        self.n = 0

    def teardown(self) -> None:
        if not self.eng.closed:
            close_store(self.eng, self.store)
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    # ----- appending ----------------------------------------------------------------------------
    @rule(sizes=st.lists(st.sampled_from([1, 2, 30, 100, 700, 5000, 17000]), min_size=1, max_size=30),
          cuts=st.lists(st.integers(0, 1 << 20), max_size=4))
    def append(self, sizes, cuts):
        lines = [line(self.n + i, s) for i, s in enumerate(sizes)]
        self.n += len(lines)
        data = b"".join(lines)
        points = sorted({c % len(data) for c in cuts} | {0, len(data)})
        p = Producer(self.q)
        done = 0
        for a, b in zip(points, points[1:], strict=False):
            before = self.q.live_end
            p.write(data[a:b])
            self._took(before, lines[done : done + self.q.live_end - before])
            done += self.q.live_end - before
        before = self.q.live_end
        p.flush()
        self._took(before, lines[done:])
        assert done + self.q.live_end - before == len(lines)

    def _took(self, before: int, lines: list[bytes]) -> None:
        for i, ln in enumerate(lines):
            self.all[before + i] = ln
            self.order.append(before + i)
        if lines:
            assert before >= self.issued, f"sequence number {before} handed out again (issued below {self.issued})"
            self.issued = before + len(lines)
            self.bounds.add(before)

    @rule(kind=st.sampled_from(["not utf-8", "bad sequence", "too long"]))
    def refused(self, kind):
        bad = {"not utf-8": b"ok\n\xff\xfe\n", "bad sequence": b"\xc3\x28\n", "too long": b"x" * 40001 + b"\n"}[kind]
        before, refused = self.q.live_end, self.q.stats["refused_writes"]
        with pytest.raises(FsError) as ei:
            Producer(self.q).write(bad)
        assert ei.value.errno == errno.EINVAL
        assert self.q.live_end == before and self.q.stats["refused_writes"] == refused + 1

    @rule()
    def sync(self):
        self.q.sync()
        self.synced = self.q.live_end

    # ----- views --------------------------------------------------------------------------------
    @rule(name=st.sampled_from([b"a", b"b", b"c"]))
    def create_view(self, name):
        if name in self.heads:
            with pytest.raises(FsError) as ei:
                self.q.create_view(name)
            assert ei.value.errno == errno.EEXIST
            return
        self.q.create_view(name)
        self.heads[name] = self.q.live_end

    @precondition(lambda self: self.heads)
    @rule(data=st.data())
    def remove_view(self, data):
        name = data.draw(st.sampled_from(sorted(self.heads)))
        self.q.remove_view(name)
        del self.heads[name]

    @precondition(lambda self: self.heads)
    @rule(data=st.data(), frac=st.floats(0, 1))
    def commit(self, data, frac):
        name = data.draw(st.sampled_from(sorted(self.heads)))
        head = self.heads[name]
        target = head + int(frac * (self.q.live_end - head))
        self.q.commit(name, target)
        self.heads[name] = target
        self.synced = max(self.synced, target)
        with pytest.raises(FsError) as ei:
            self.q.commit(name, self.q.live_end + 1)
        assert ei.value.errno == errno.EINVAL
        if target > self.q.first_seq:
            with pytest.raises(FsError) as ei:
                self.q.commit(name, target - 1)
            assert ei.value.errno == errno.EINVAL

    @precondition(lambda self: self.heads)
    @rule(data=st.data(), frac=st.floats(0, 1))
    def seek(self, data, frac):
        name = data.draw(st.sampled_from(sorted(self.heads)))
        lo = self.q.first_seq
        target = lo + int(frac * (self.q.live_end - lo))
        self.q.seek(name, target)
        self.heads[name] = target
        self.synced = max(self.synced, target)
        if lo > 0:
            with pytest.raises(FsError) as ei:
                self.q.seek(name, lo - 1)
            assert ei.value.errno == errno.EINVAL

    # ----- retention ----------------------------------------------------------------------------
    @rule(keep=st.integers(1, 20))
    def retain(self, keep):
        self.q.set_config(QueueConfig(**{**SMALL.__dict__, "retain_count": keep}))
        while self.q._reclaim_now():
            pass
        first = self.q.first_seq
        dropped = [s for s in self.order if s < first]
        unread = [s for s in dropped if any(s >= h for h in self.heads.values())]
        assert not unread, f"retention dropped records a view had not read: {unread[:5]} (heads {self.heads})"
        # a head in the gap a crash left (numbers never used) below the first record now means that
        # record: the queue loads it so (as after the crash rule)
        self.heads = {n: max(h, first) for n, h in self.heads.items()}
        kept = len(self.order) - len(dropped)
        assert kept >= min(keep, len(self.order)), f"retention of {keep} left {kept} records"
        self.order = [s for s in self.order if s >= first]
        event("retention reclaimed blocks" if dropped else "retention reclaimed nothing")
        self.q.set_config(SMALL)

    # ----- stopping -----------------------------------------------------------------------------
    @rule()
    def reopen(self):
        end, first = self.q.live_end, self.q.first_seq
        close_store(self.eng, self.store)
        self.eng, self.store = open_store(self.path)
        self.q = self.store.get(b"q")
        assert (self.q.live_end, self.q.first_seq) == (end, first)
        assert {n: v.head for n, v in self.q.views.items()} == self.heads
        self.synced = end

    @rule()
    def crash(self):
        close_store(self.eng, self.store, crash=True)
        self.eng, self.store = open_store(self.path)
        self.q = self.store.get(b"q")
        first = self.q.first_seq
        # a head below the oldest record (numbers the crash skipped, records it lost) starts there
        self.heads = {n: max(h, first) for n, h in self.heads.items()}
        assert {n: v.head for n, v in self.q.views.items()} == self.heads, "a committed view head was lost"
        assert self.q.live_end >= self.issued, "the queue continues at a number it handed out before"
        got = read_from(self.q, first).splitlines(keepends=True)
        expect = [s for s in sorted(self.all) if s >= first]
        assert [self.all[s] for s in expect[: len(got)]] == got, "records after the crash are not the model's"
        lost = expect[len(got) :]
        assert not lost or lost[0] >= self.synced, f"synced records lost: {lost[0]} (synced below {self.synced})"
        assert not lost or lost[0] in self.bounds, f"the crash cut a batch at {lost[0]}"
        event("a crash lost records" if lost else "a crash lost nothing")
        for s in lost:
            del self.all[s]
        self.order = expect[: len(got)]
        self.bounds = set()

    # ----- what must always hold ----------------------------------------------------------------
    @invariant()
    def views_read_the_model(self):
        for name, head in self.heads.items():
            want = b"".join(self.all[s] for s in self.order if s >= head)
            assert read_from(self.q, head, chunk=5000) == want, f"view {name!r} from head {head}"
        if self.order:
            mid = self.order[len(self.order) // 2]
            r = Reader(self.q, mid)
            assert r.read(len(self.all[mid])) == self.all[mid]
            r.close()
        assert self.q.records == len(self.order)

    @invariant()
    def segments_hold_their_records(self):
        prev = None
        for first, rec in self.q.segments():
            assert prev is None or first == prev, "segments are not back to back"
            want = b"".join(self.all[s] for s in self.order if first <= s < rec.end)
            assert read_segment(self.q, first) == want and rec.size == len(want)
            prev = rec.end


TestQueueMachine = QueueMachine.TestCase
TestQueueMachine.settings = settings(max_examples=int(os.environ.get("TRAX_QUEUE_EXAMPLES", "25")),
                                     stateful_step_count=25, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])


# ----- single behaviours ----------------------------------------------------------------------
@pytest.fixture
def store(tmp_path):
    path = str(tmp_path / "e.img")
    new_image(path)
    eng, st_ = open_store(path)
    yield st_
    if not eng.closed:
        close_store(eng, st_)


def lines(first: int, n: int, size: int = 100) -> bytes:
    return b"".join(line(i, size) for i in range(first, first + n))


def test_fan_out_stores_once_and_every_view_reads_everything(store):
    q = store.create(b"events", QueueConfig(block_size=16384, retain_age_seconds=None))
    for v in (b"v1", b"v2", b"v3", b"v4"):
        q.create_view(v)
    data = lines(0, 3000)
    p = Producer(q)
    for at in range(0, len(data), 10000):
        p.write(data[at : at + 10000])
    p.flush()
    blocks = q.blocks
    free = store.io.free_pages()
    for v in (b"v1", b"v2", b"v3", b"v4"):
        assert read_from(q, q.views[v].head, chunk=7777) == data
    assert q.blocks == blocks and store.io.free_pages() == free  # reading allocates nothing
    assert blocks * 16384 < len(data) * 1.2  # one copy, however many views


def test_retention_by_count_and_age_frees_blocks(store):
    q = store.create(b"c", QueueConfig(block_size=16384, retain_age_seconds=None, retain_count=500))
    q.append(lines(0, 5000))
    free = store.io.free_pages()
    q.tick(0)
    assert q.stats["blocks_reclaimed"] > 0 and 500 <= q.records < 700
    assert read_from(q, q.first_seq) == lines(q.first_seq, 5000 - q.first_seq)
    q.sync()
    store.io.e.alloc._reclaim()  # frees become reusable once durable
    assert store.io.free_pages() > free
    a = store.create(b"a", QueueConfig(block_size=16384, retain_age_seconds=0.0))
    a.append(lines(0, 2000))
    a.create_view(b"slow")
    a.append(lines(2000, 2000))
    a.tick(0)  # everything is past the age limit, but the view holds what it has not read
    assert a.first_seq <= 2000 and read_from(a, 2000) == lines(2000, 2000)
    a.commit(b"slow", 4000)
    a.tick(0)
    assert a.blocks == 1 and a.first_seq == a.tail.first_seq  # the tail is never reclaimed


def test_segments_seal_by_time_and_match_records(store):
    q = store.create(b"s", QueueConfig(block_size=16384, seal_seconds=0.01, retain_age_seconds=None))
    q.append(lines(0, 10))
    q.append(lines(10, 5))
    import time
    time.sleep(0.02)
    q.tick(0)
    q.append(lines(15, 1))
    segs = q.segments()
    assert [(f, r.end, r.count) for f, r in segs] == [(0, 15, 15)]
    assert read_segment(q, 0) == lines(0, 15)
    r = Reader(q, 0)
    r.close()


def test_seek_by_time(store):
    import time
    q = store.create(b"t", QueueConfig(block_size=16384, retain_age_seconds=None))
    q.append(lines(0, 300))
    time.sleep(0.01)
    t = time.time_ns() // 1_000_000
    time.sleep(0.01)
    q.append(lines(300, 300))
    assert q.seq_at(t) == 300
    assert q.seq_at(0) == 0 and q.seq_at(t + 10**9) == q.live_end


def test_full_volume_refuses_appends_and_loses_nothing(tmp_path):
    path = str(tmp_path / "small.img")
    new_image(path, size=24 << 20, log_size=4 << 20)
    eng, st_ = open_store(path)
    q = st_.create(b"full", QueueConfig(retain_age_seconds=None))
    batch = lines(0, 1300)
    n = 0
    with pytest.raises(FsError) as ei:
        while True:
            q.append(batch)
            n += 1
    assert ei.value.errno == errno.ENOSPC
    end = q.live_end
    assert end == n * 1300 and q.stats["appended_records"] == end
    assert read_from(q, 0) == batch * n
    q.sync()
    close_store(eng, st_, crash=True)
    eng, st_ = open_store(path)
    q = st_.get(b"full")
    assert read_from(q, 0) == batch * n
    free = st_.io.free_pages()
    st_.remove(b"full")
    eng.log.force(eng.log.reserved())
    eng.alloc._reclaim()
    assert st_.io.free_pages() > free + n * 32 - 64  # the queue's space is back
    close_store(eng, st_)


def test_bad_names(store):
    for name, err in [(b"x" * 256, errno.ENAMETOOLONG), (b"..", errno.EINVAL), (b"a/b", errno.EINVAL),
                      (b"", errno.EINVAL)]:
        with pytest.raises(FsError) as ei:
            store.create(name)
        assert ei.value.errno == err
    store.create(b"x" * 255)
    with pytest.raises(FsError) as ei:
        store.create(b"x" * 255)
    assert ei.value.errno == errno.EEXIST
    with pytest.raises(FsError) as ei:
        store.get(b"nope")
    assert ei.value.errno == errno.ENOENT


def test_memory_stays_bounded_when_producers_run_ahead(tmp_path):
    path = str(tmp_path / "e.img")
    new_image(path, size=96 << 20)
    eng, st_ = open_store(path, cache_bytes=1 << 20)
    q = st_.create(b"m", QueueConfig(retain_age_seconds=None))
    q.create_view(b"v")
    batch = lines(0, 1300)
    for _ in range(400):  # 52 MB: the view reads none of it
        q.append(batch)
        assert st_.cache.bytes <= 1 << 20
    r = Reader(q, 0)
    got = 0
    while chunk := r.read(1 << 20):
        got += len(chunk)
        assert st_.cache.bytes <= 1 << 20
    r.close()
    assert got == len(batch) * 400
    close_store(eng, st_)


def test_damaged_block_is_an_error_naming_it(tmp_path):
    path = str(tmp_path / "e.img")
    new_image(path)
    eng, st_ = open_store(path)
    q = st_.create(b"d", QueueConfig(block_size=16384, retain_age_seconds=None))
    q.append(lines(0, 500))
    q.sync()
    page = next(iter(st_.t["blocks"].items()))[1]
    from traxfs.fs.queues.index import BlockEntry
    e = BlockEntry.unpack(page)
    close_store(eng, st_)
    with open(path, "r+b") as f:
        f.seek(eng.sb.pages_offset + e.page * 4096 + 3000)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))
    eng, st_ = open_store(path)
    q = st_.get(b"d")
    with pytest.raises(FsError) as ei:
        read_from(q, 0)
    assert ei.value.errno == errno.EIO and "queue 'd': block 0" in str(ei.value) and "checksum" in str(ei.value)
    close_store(eng, st_)


@given(st.binary(max_size=400).map(lambda b: b.replace(b"\x0b", b"\n")), st.integers(0, 400), st.integers(-1, 400))
@settings(max_examples=300, deadline=None)
def test_the_line_scanner_agrees_with_python(data, start, end):
    """The Cython scan (64-byte strides and a tail) counts what ``bytes.count`` counts and sees
    every non-ASCII byte, wherever it sits in the range."""
    stop = len(data) if end < 0 or end > len(data) else end
    if start > stop:
        with pytest.raises(ValueError, match="outside"):
            scan_lines(data, start, end)
        return
    assert scan_lines(data, start, end) == (data.count(b"\n", start, stop), data[start:stop].isascii())
    assert scan_lines(bytearray(data), start, end) == scan_lines(memoryview(data), start, end)


def test_the_in_process_benchmark_runs_and_four_views_store_the_bytes_once(tmp_path):
    from traxfs.tools import bench_queue

    results = bench_queue.run(tmp_path, 30_000)
    for key in ("append_1p_nofsync", "append_1p_fsync64M", "append_4p_nofsync", "consume_1v", "consume_4v"):
        assert results[key]["store"]["records"] == results[key]["file"]["records"] > 0
    assert results["consume_4v"]["store"]["records"] == results["append_1p_nofsync"]["store"]["records"]
    assert results["volume_bytes"]["1_views_bytes"] > 0 and results["volume_bytes"]["ratio_4_to_1"] <= 1.05
    assert "store/file" in bench_queue.table(results)


def test_a_head_in_numbers_a_crash_skipped_starts_at_the_oldest_record(tmp_path):
    """A view at the live end of an empty queue, records appended and never made durable, a crash:
    the queue continues past the reservation, and the view's head is the oldest record's number
    (the head is kept, status shows no lag of records that do not exist, retention holds)."""
    path = str(tmp_path / "e.img")
    new_image(path)
    eng, store = open_store(path)
    q = store.create(b"q", SMALL)
    q.create_view(b"v")
    assert q.views[b"v"].head == 0
    Producer(q).write(lines(0, 50))
    close_store(eng, store, crash=True)
    eng, store = open_store(path)
    try:
        q = store.get(b"q")
        assert q.records == 0 and q.first_seq == q.live_end > 0
        assert q.views[b"v"].head == q.first_seq
        assert queue_status(q)["views"]["v"]["lag"] == 0
        q.set_config(QueueConfig(**{**SMALL.__dict__, "retain_count": 1}))
        q._reclaim_now()
        assert q.first_seq <= q.views[b"v"].head
        Producer(q).write(lines(0, 3))
        assert read_from(q, q.views[b"v"].head) == lines(0, 3)
    finally:
        close_store(eng, store)

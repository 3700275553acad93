"""Tests of the Aether log buffers in ``traxfs.ext.logbuffer`` (digest ``aether.md`` §4, §5, §8).

Every implementation (the mutex baseline and the CD buffer with each of its options) must give the
same log.  Test records are self-describing: ``[u32 len][u32 crc32c(payload)][u64 lsn slot]`` +
payload, the payload starting with ``[u32 thread][u32 seq]``.  The buffer writes each record's own
LSN into the slot, so a flushed stream can be parsed from its first LSN and checked to tile the LSN
space exactly: no gap, no overlap, every record once, with its payload and its own LSN.
"""

from __future__ import annotations

import functools
import random
import struct
import threading
import time

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from traxfs.ext.logbuffer import ConsolidatedLogBuffer, MutexLogBuffer
from traxfs.ext.logbuffer_drivers import _native_stress

IMPLS = {
    "mutex": MutexLogBuffer,
    "cd": ConsolidatedLogBuffer,
    "cd-locked": functools.partial(ConsolidatedLogBuffer, fast_path="locked"),
    "cd-delegated": functools.partial(ConsolidatedLogBuffer, release="delegated"),
    "cd-locked-delegated": functools.partial(ConsolidatedLogBuffer, fast_path="locked", release="delegated"),
    "cd-1slot": functools.partial(ConsolidatedLogBuffer, slots=1),
}
impl_names = pytest.mark.parametrize("impl", list(IMPLS))

HEADER = struct.Struct("<IIQ")  # len, crc32c(payload), lsn slot
ID = struct.Struct("<II")  # thread, seq: the first 8 payload bytes


def make_record(tid: int, seq: int, size: int, rng: random.Random) -> bytes:
    payload = ID.pack(tid, seq) + rng.randbytes(size - HEADER.size - ID.size)
    return HEADER.pack(size, crc32c.crc32c(payload), 0) + payload


def bimodal_size(rng: random.Random) -> int:
    """Mostly small records (48..160 B), one in six large (600..1200 B)."""
    return rng.randint(600, 1200) if rng.random() < 1 / 6 else rng.randint(48, 160)


def expected(record: bytes, lsn: int) -> bytes:
    return record[:8] + lsn.to_bytes(8, "little") + record[16:]


def check_stream(stream: bytes, start: int, per_thread: list[list[bytes]],
                 lsns: list[list[int]] | None = None) -> int:
    """Parse the flushed stream from LSN ``start``; every record exactly once, correct, in place."""
    seen: dict[tuple[int, int], int] = {}
    off = 0
    while off < len(stream):
        assert off + HEADER.size <= len(stream), f"truncated header at LSN {start + off}"
        size, crc, lsn = HEADER.unpack_from(stream, off)
        assert lsn == start + off, f"record at LSN {start + off} carries LSN {lsn}"
        assert HEADER.size + ID.size <= size <= len(stream) - off, f"bad length {size} at LSN {lsn}"
        payload = stream[off + HEADER.size:off + size]
        assert crc32c.crc32c(payload) == crc, f"checksum mismatch at LSN {lsn}"
        tid, seq = ID.unpack_from(payload)
        assert (tid, seq) not in seen, f"record {(tid, seq)} twice (LSNs {seen.get((tid, seq))}, {lsn})"
        assert stream[off:off + size] == expected(per_thread[tid][seq], lsn), f"record {(tid, seq)} differs"
        seen[(tid, seq)] = lsn
        off += size
    assert off == len(stream)
    total = sum(len(recs) for recs in per_thread)
    assert len(seen) == total, f"{total - len(seen)} records missing from the log"
    if lsns is not None:
        for tid, got in enumerate(lsns):
            assert got == [seen[(tid, i)] for i in range(len(got))], f"thread {tid}: insert() LSNs differ"
    return len(seen)


# ------------------------------------------------------------------ single thread


@pytest.mark.timeout(60)
@impl_names
def test_round_trip_with_wraparound(impl):
    rng = random.Random(7)
    cap = 1000
    start = 10**12 + 777  # not a multiple of the capacity: positions start mid-ring
    buf = IMPLS[impl](cap, start)
    assert (buf.released(), buf.reserved(), buf.flushed(), buf.capacity) == (start, start, start, cap)
    lsn_expected = start
    for seq in range(200):  # about 20 trips around the ring
        rec = make_record(0, seq, rng.randint(24, cap // 2), rng)
        lsn = buf.insert(rec)
        assert lsn == lsn_expected
        lsn_expected += len(rec)
        assert buf.released() == buf.reserved() == lsn_expected
        assert buf.read(lsn, lsn + len(rec)) == expected(rec, lsn)
        if rng.random() < 0.5:
            buf.mark_flushed(buf.released())
        elif buf.reserved() - buf.flushed() > cap // 2:
            buf.mark_flushed(lsn)  # keep the last record readable
    assert buf.reserved() - start > 10 * cap


@pytest.mark.timeout(60)
@impl_names
def test_lsn_field_split_at_ring_end(impl):
    """The u64 LSN slot itself straddles the end of the ring; read() returns contiguous bytes."""
    cap = 256
    for cut in range(1, 24):  # the record starts ``cut`` bytes before the ring's end
        start = 5 * cap - cut
        buf = IMPLS[impl](cap, start)
        rec = bytes(range(100, 148))
        assert buf.insert(rec) == start
        assert buf.read(start, start + len(rec)) == expected(rec, start)
        assert buf.read(start + 3, start + 20) == expected(rec, start)[3:20]


@pytest.mark.timeout(60)
@impl_names
def test_accepts_any_bytes_like(impl):
    buf = IMPLS[impl](4096, 0)
    recs = [bytes(32), bytearray(b"a" * 40), memoryview(b"b" * 24)]
    for r in recs:
        lsn = buf.insert(r)
        assert buf.read(lsn, lsn + len(r)) == expected(bytes(r), lsn)
    with pytest.raises(TypeError):
        buf.insert("not bytes, a str of forty characters......")


@pytest.mark.timeout(60)
@impl_names
def test_bad_sizes_raise(impl):
    buf = IMPLS[impl](1000, 0)
    assert buf.max_record == 500
    for n in (0, 1, 15, 501, 1000, 5000):
        with pytest.raises(ValueError):
            buf.insert(bytes(n))
    assert buf.reserved() == buf.released() == 0  # nothing reserved by a refused insert
    assert buf.insert(bytes(16)) == 0
    assert buf.insert(bytes(500)) == 16


@pytest.mark.timeout(60)
@impl_names
def test_read_and_mark_flushed_validate_their_range(impl):
    buf = IMPLS[impl](1000, 100)
    buf.insert(bytes(50))
    buf.insert(bytes(50))  # log [100, 200)
    for a, b in ((99, 150), (150, 201), (160, 150), (-1, 10)):
        with pytest.raises(ValueError):
            buf.read(a, b)
    assert buf.read(200, 200) == b""
    with pytest.raises(ValueError):
        buf.mark_flushed(201)
    buf.mark_flushed(150)
    with pytest.raises(ValueError):
        buf.mark_flushed(149)  # the flushed mark never moves back
    with pytest.raises(ValueError):
        buf.read(100, 200)  # below flushed: that space may be reused
    assert buf.read(150, 200) == expected(bytes(50), 150)
    assert buf.flushed() == 150


def test_constructor_validation():
    for bad in ((31, 0), (1000, -1)):
        with pytest.raises(ValueError):
            MutexLogBuffer(*bad)
        with pytest.raises(ValueError):
            ConsolidatedLogBuffer(*bad)
    for kw in ({"slots": 0}, {"slots": 17}, {"fast_path": "fast"}, {"release": "whenever"}):
        with pytest.raises(ValueError):
            ConsolidatedLogBuffer(1000, 0, **kw)


@pytest.mark.timeout(60)
@impl_names
@given(
    cap=st.integers(min_value=32, max_value=700),
    start=st.integers(min_value=0, max_value=2**40),
    ops=st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=10**6)), max_size=60),
)
def test_model(impl, cap, start, ops):
    """Random inserts and partial flushes against a bytes model of the log."""
    buf = IMPLS[impl](cap, start)
    log = bytearray()
    flushed = start
    for is_insert, x in ops:
        end = start + len(log)
        if is_insert:
            size = 16 + x % (cap // 2 - 15)
            if end + size - flushed > cap:  # would block: the flusher catches up first
                flushed = end
                buf.mark_flushed(flushed)
            rec = x.to_bytes(8, "little") + bytes(8) + bytes((x + i) & 0xFF for i in range(size - 16))
            assert buf.insert(rec) == end
            log += expected(rec, end)
        else:
            flushed += x % (end - flushed + 1)
            buf.mark_flushed(flushed)
        end = start + len(log)
        assert buf.released() == buf.reserved() == end
        assert buf.read(flushed, end) == bytes(log[flushed - start:])
    assert buf.wait_released(start + len(log), 0) == start + len(log)


# ------------------------------------------------------------------ concurrency


def run_python_threads(buf, per_thread: list[list[bytes]], flusher_delay: float = 0.0) -> dict:
    """Insert from one Python thread per list while a flusher thread consumes the log; return the
    flushed stream, the LSNs insert() returned, and what the flusher observed."""
    start = buf.flushed()
    lsns: list[list[int]] = [[] for _ in per_thread]
    errors: list[BaseException] = []
    go = threading.Barrier(len(per_thread))
    done = threading.Event()
    chunks: list[bytes] = []
    observed = {"rounds": 0, "violations": []}

    def inserter(tid: int) -> None:
        try:
            go.wait()
            out = lsns[tid]
            for rec in per_thread[tid]:
                out.append(buf.insert(rec))
        except BaseException as e:  # noqa: BLE001 - re-raised in the test
            errors.append(e)

    def flusher() -> None:
        try:
            flushed = start
            last_released = start
            while True:
                r = buf.wait_released(flushed + 1, 0.01)
                reserved = buf.reserved()  # read after released: released <= reserved must hold
                if r < last_released or r > reserved:
                    observed["violations"].append((last_released, r, reserved))
                last_released = r
                if r > flushed:
                    chunks.append(buf.read(flushed, r))
                    if flusher_delay:
                        time.sleep(flusher_delay)
                    buf.mark_flushed(r)
                    flushed = r
                    observed["rounds"] += 1
                elif done.is_set() and buf.released() == flushed:
                    return
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=inserter, args=(i,)) for i in range(len(per_thread))]
    ft = threading.Thread(target=flusher)
    ft.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=50)
        assert not t.is_alive(), "an inserter hung"
    done.set()
    ft.join(timeout=20)
    assert not ft.is_alive(), "the flusher hung"
    if errors:
        raise errors[0]
    return {"stream": b"".join(chunks), "lsns": lsns, **observed}


def workload(seed: int, threads: int, per_thread: int) -> list[list[bytes]]:
    rng = random.Random(seed)
    return [[make_record(t, i, bimodal_size(rng), rng) for i in range(per_thread)] for t in range(threads)]


@pytest.mark.timeout(60)
@impl_names
@pytest.mark.parametrize("fill_delay_us", [0, 40])
def test_python_threads_tile_the_log(impl, fill_delay_us):
    recs = workload(11, threads=8, per_thread=400 if fill_delay_us else 1500)
    start = 3 * 2**32 - 12345
    buf = IMPLS[impl](16 * 1024, start)  # small ring: many wraparounds and waits for space
    buf._set_fill_delay(fill_delay_us)  # scrambles the order in which fills complete
    buf._set_chaos(8 if fill_delay_us else 0)
    res = run_python_threads(buf, recs)
    assert res["violations"] == [], "released moved backwards or passed reserved"
    check_stream(res["stream"], start, recs, res["lsns"])
    total = sum(len(r) for t in recs for r in t)
    assert buf.released() == buf.reserved() == buf.flushed() == start + total
    assert res["rounds"] > 1


@pytest.mark.timeout(60)
@impl_names
def test_delayed_flusher_makes_inserters_wait(impl):
    recs = workload(12, threads=6, per_thread=300)
    buf = IMPLS[impl](4096, 0)
    res = run_python_threads(buf, recs, flusher_delay=0.001)
    check_stream(res["stream"], 0, recs, res["lsns"])
    assert res["violations"] == []
    assert buf.stats()["space_waits"] > 0


@pytest.mark.timeout(60)
@impl_names
@pytest.mark.parametrize("fill_delay_us,chaos", [(0, 0), (30, 0), (0, 8)])
def test_native_threads_tile_the_log(impl, fill_delay_us, chaos):
    """The same check with 8 pthreads and no GIL anywhere: the atomics under real parallelism,
    then with random delays inside fill and with random pauses at the interleaving points."""
    recs = workload(13, threads=8, per_thread=2500 if not (fill_delay_us or chaos) else 300)
    start = 2**40 + 17
    buf = IMPLS[impl](8 * 1024, start)
    buf._set_fill_delay(fill_delay_us)
    buf._set_chaos(chaos)
    res = _native_stress(buf, recs)
    assert res["violations"] == 0
    check_stream(res["stream"], start, recs, res["lsns"])
    assert buf.released() == buf.reserved() == start + len(res["stream"])


@pytest.mark.timeout(60)
def test_groups_form_under_contention():
    """With the mutex held through a slow fill, the other threads must consolidate."""
    recs = workload(14, threads=8, per_thread=150)
    buf = ConsolidatedLogBuffer(64 * 1024, 0, fast_path="locked")
    buf._set_fill_delay(200)
    res = _native_stress(buf, recs)
    check_stream(res["stream"], 0, recs, res["lsns"])
    stats = buf.stats()
    assert stats["groups"] > 0
    assert stats["fast_path_inserts"] + stats["groups"] <= 8 * 150


# ------------------------------------------------------------------ blocking


@pytest.mark.timeout(60)
@impl_names
def test_full_buffer_blocks_until_flushed(impl):
    cap = 256
    start = 1000
    buf = IMPLS[impl](cap, start)
    for i in range(4):
        assert buf.insert(bytes([i]) * 64) == start + 64 * i  # ring full
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(buf.insert(b"\xee" * 64)))
    t.start()
    # While it waits, the GIL is free: this thread keeps running Python code.
    n, t_end = 0, time.monotonic() + 0.3
    while time.monotonic() < t_end:
        n += 1
    assert n > 1000
    assert t.is_alive() and result == []
    assert buf.released() == start + cap
    buf.mark_flushed(start + 32)  # not enough room for 64 bytes yet
    time.sleep(0.1)
    assert t.is_alive()
    buf.mark_flushed(start + 64)
    t.join(timeout=10)
    assert not t.is_alive() and result == [start + cap]
    assert buf.read(start + cap, start + cap + 64) == expected(b"\xee" * 64, start + cap)


@pytest.mark.timeout(60)
@impl_names
def test_many_blocked_inserters_all_complete(impl):
    cap = 1024
    buf = IMPLS[impl](cap, 0)
    buf.insert(bytes(512))
    buf.insert(bytes(512))  # full
    rng = random.Random(3)
    recs = [[make_record(t, i, rng.randint(48, 200), rng) for i in range(20)] for t in range(6)]
    lsns: list[list[int]] = [[] for _ in recs]
    threads = [threading.Thread(target=lambda t=t: lsns[t].extend(buf.insert(r) for r in recs[t]))
               for t in range(len(recs))]
    for t in threads:
        t.start()
    time.sleep(0.2)
    assert buf.reserved() == cap and all(t.is_alive() for t in threads)
    chunks, flushed = [], cap
    buf.mark_flushed(cap)
    while any(t.is_alive() for t in threads) or buf.released() > flushed:
        r = buf.wait_released(flushed + 1, 0.05)
        if r > flushed:
            chunks.append(buf.read(flushed, r))
            buf.mark_flushed(r)
            flushed = r
    for t in threads:
        t.join(timeout=10)
    check_stream(b"".join(chunks), cap, recs, lsns)


@pytest.mark.timeout(60)
@impl_names
def test_wait_released(impl):
    buf = IMPLS[impl](4096, 500)
    t0 = time.monotonic()
    assert buf.wait_released(501, 0.1) == 500
    assert time.monotonic() - t0 >= 0.09
    assert buf.wait_released(400, 5) == 500  # already there: no wait
    assert buf.wait_released(501, 0) == 500
    timer = threading.Timer(0.1, buf.insert, args=(bytes(100),))
    timer.start()
    t0 = time.monotonic()
    assert buf.wait_released(600, 10) == 600
    assert time.monotonic() - t0 < 5
    timer.join()
    timer = threading.Timer(0.05, buf.insert, args=(bytes(100),))
    timer.start()
    assert buf.wait_released(700, None) == 700
    timer.join()

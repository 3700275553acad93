"""The durable log append path: ``Device.write_durable`` (O_DIRECT|O_DSYNC on image files, the
power-loss wrapper's "this write only" semantics), ``LogStore.append_durable`` (whole sectors, the
kept tail, the wrap), parked followers in the log manager's group commit, and the log buffer's
GIL-held insert."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from traxfs.ext import logbuffer
from traxfs.fs.engine.logmanager import LogManager
from traxfs.fs.engine.logrecord import RecType
from traxfs.fs.engine.logstore import FIRST_LSN, LogStore
from traxfs.volume.device import Device, ImageFileDevice, create_image
from traxfs.volume.powerloss import PowerLossDevice


def test_image_write_durable_goes_direct_and_reads_back(tmp_path):
    dev = create_image(str(tmp_path / "d.img"), 8 << 20)
    dev.write(0, b"\1" * 8192)  # buffered bytes in the page cache over the same range
    dev.write_durable(4096, b"\2" * 1024)
    assert dev._direct_fd not in (None, -1)  # ext4 takes O_DIRECT: the direct descriptor is used
    assert dev.read(4000, 1200) == b"\1" * 96 + b"\2" * 1024 + b"\1" * 80
    dev.write_durable(5000, b"\3" * 10)  # unaligned: the buffered write + fdatasync path
    assert dev.read(4990, 30) == b"\2" * 10 + b"\3" * 10 + b"\2" * 10
    dev.close()
    with open(tmp_path / "d.img", "rb") as f:
        f.seek(4096)
        assert f.read(1024) == b"\2" * 904 + b"\3" * 10 + b"\2" * 110


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs tmpfs at /dev/shm")
def test_image_write_durable_on_tmpfs_direct_or_not():
    """tmpfs refuses O_DIRECT before Linux 6.6 and takes it after: either way the bytes land,
    and a refusal is remembered (the default write + flush path from then on)."""
    path = f"/dev/shm/traxfs-test-{os.getpid()}.img"
    try:
        dev = create_image(path, 4 << 20)
        try:
            os.close(os.open(path, os.O_RDWR | os.O_DIRECT))
            direct = True
        except OSError:
            direct = False
        dev.write_durable(512, b"\5" * 512)
        assert (dev._direct_fd != -1) == direct
        dev.write_durable(1024, b"\6" * 512)
        assert dev.read(512, 1024) == b"\5" * 512 + b"\6" * 512
        dev.close()
    finally:
        os.unlink(path)


def test_write_durable_refuses_out_of_range_and_changes_nothing(tmp_path):
    dev = create_image(str(tmp_path / "d.img"), 4 << 20)
    dev.write_durable(0, b"\7" * 512)
    with pytest.raises(Exception, match="outside the device"):
        dev.write_durable(dev.size - 512, b"\0" * 1024)
    assert dev.read(0, 512) == b"\7" * 512 and dev.read(dev.size - 512, 512) == bytes(512)
    dev.close()


def test_powerloss_write_durable_survives_and_supersedes_pending(tmp_path):
    inner = create_image(str(tmp_path / "p.img"), 4 << 20)
    dev = PowerLossDevice(inner, seed=1)
    dev.write(0, b"A" * 2048)  # pending, overlapped in the middle by the durable write below
    dev.write(8192, b"B" * 512)  # pending, untouched by it
    dev.write_durable(512, b"C" * 512)
    assert dev.read(0, 2048) == b"A" * 512 + b"C" * 512 + b"A" * 1024
    dev.crash(keep=0.0, tear=False)  # every pending write is lost
    assert inner.read(512, 512) == b"C" * 512  # the durable write is not
    assert inner.read(0, 512) == bytes(512) and inner.read(1024, 1024) == bytes(1024)
    assert inner.read(8192, 512) == bytes(512)
    inner2 = ImageFileDevice(str(tmp_path / "p.img"))
    dev2 = PowerLossDevice(inner2, seed=2)
    dev2.write(0, b"D" * 1024)
    dev2.write_durable(0, b"E" * 1024)  # wholly supersedes the pending write
    dev2.crash(keep=1.0, tear=False)  # even if every pending write survived, it is gone
    assert inner2.read(0, 1024) == b"E" * 1024
    inner.close()
    inner2.close()


@pytest.mark.parametrize("seed", range(4))
def test_append_durable_tiles_the_region_across_wraps(tmp_path, seed):
    """Random appends at the log's end, every size and alignment, over three laps of a small
    region: what is read back is exactly what was appended, and nothing before an append's LSN
    is disturbed by the whole-sector write (the kept tail carries it)."""
    dev = create_image(str(tmp_path / "l.img"), 8 << 20)
    store = LogStore(dev, 8192, 1 << 20, seed=3)
    rng = random.Random(seed)
    lsn, history = FIRST_LSN, []
    while lsn < FIRST_LSN + 3 * store.size:
        data = rng.randbytes(rng.choice([8, 64, 200, 511, 512, 513, 4096, rng.randint(1, 20000)]))
        if rng.random() < 0.1:
            store._tail = (-1, b"")  # as after a reopen: the head sector is read back instead
        before = store.read(max(lsn - 700, FIRST_LSN), min(700, lsn - FIRST_LSN)) if lsn > FIRST_LSN else b""
        store.append_durable(lsn, data)
        history.append((lsn, data))
        assert store.read(lsn, len(data)) == data
        if before:
            assert store.read(lsn - len(before), len(before)) == before
        lsn += len(data)
    # the last lap is intact as a whole
    tail = [(at, d) for at, d in history if at >= lsn - store.size + 4096]
    for at, d in tail:
        assert store.read(at, len(d)) == d
    dev.close()


class _GatedDevice(Device):
    """An image whose durable writes wait for a gate: holds a leader inside its flush."""

    def __init__(self, inner):
        self.inner, self.path, self.size, self.block_size = inner, inner.path, inner.size, inner.block_size
        self.gate, self.entered = threading.Event(), threading.Event()

    def read(self, offset, length):
        return self.inner.read(offset, length)

    def write(self, offset, data):
        self.inner.write(offset, data)

    def flush(self):
        self.inner.flush()

    def write_durable(self, offset, data):
        self.entered.set()
        assert self.gate.wait(30)
        self.inner.write_durable(offset, data)

    def close(self):
        self.inner.close()


def _log(dev, kind="mutex"):
    factory = {"cd": logbuffer.ConsolidatedLogBuffer, "mutex": logbuffer.MutexLogBuffer}[kind]
    return LogManager(LogStore(dev, 0, 1 << 20, seed=9), FIRST_LSN, epoch=1, buffer_factory=factory,
                      buffer_size=256 << 10)


def _held_leader(tmp_path):
    """A log on a gated device whose first committer is the leader, held inside its flush until
    ``dev.gate`` is set: (device, log, the leader's thread)."""
    dev = _GatedDevice(create_image(str(tmp_path / "g.img"), 4 << 20))
    log = _log(dev)
    _, first = log.append(RecType.COMMIT, xid=1)
    leader = threading.Thread(target=lambda: log.commit_handle(first, will_wait=True).wait())
    leader.start()
    assert dev.entered.wait(10)
    return dev, log, leader


@pytest.mark.timeout(60)
def test_parked_followers_ride_one_flush(tmp_path):
    """Committers that arrive while a leader is inside its flush park; when it ends, the next
    leader's one flush covers all of them, and every one returns durable."""
    dev, log, leader = _held_leader(tmp_path)
    done = []

    def follower(x: int) -> None:
        _, end = log.append(RecType.COMMIT, xid=x)
        assert log.commit_handle(end, will_wait=True).wait()
        assert log.durable_lsn >= end
        done.append(x)

    followers = [threading.Thread(target=follower, args=(x,)) for x in range(2, 12)]
    for t in followers:
        t.start()
    deadline = time.monotonic() + 10
    most = 0  # a parked follower leaves the list for a moment every 0.5 s to look again
    while most < 10 and time.monotonic() < deadline:
        most = max(most, len(log._followers))
        time.sleep(0.01)
    assert most == 10 and not done  # all parked behind the held leader
    flushes = log.stats["flushes"]
    dev.gate.set()
    for t in [leader, *followers]:
        t.join(20)
    assert sorted(done) == list(range(2, 12))
    assert log.stats["flushes"] - flushes == 2  # the leader's, then one for all ten followers
    log.close()
    dev.close()


@pytest.mark.timeout(60)
def test_unclean_stop_wakes_parked_followers(tmp_path):
    dev, log, leader = _held_leader(tmp_path)
    _, end = log.append(RecType.COMMIT, xid=2)
    got = []
    follower = threading.Thread(target=lambda: got.append(log.commit_handle(end, will_wait=True).wait()))
    follower.start()
    while not log._followers:
        time.sleep(0.01)
    closer = threading.Thread(target=log.close, kwargs={"flush": False})
    closer.start()
    follower.join(5)
    assert got == [False]  # not durable, and told so at once rather than left parked
    dev.gate.set()
    leader.join(10)
    closer.join(10)
    dev.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["mutex", "cd"])
def test_many_blocking_committers_lose_nothing(tmp_path, kind):
    dev = create_image(str(tmp_path / "m.img"), 4 << 20)
    log = _log(dev, kind)
    records: dict[int, bytes] = {}
    lock = threading.Lock()

    def worker(w: int) -> None:
        rng = random.Random(w)
        for i in range(150):
            payload = rng.randbytes(rng.randint(0, 300))
            lsn, end = log.append(RecType.COMMIT, xid=w * 1000 + i + 1, payload=payload)
            with lock:
                records[lsn] = payload
            assert log.commit_handle(end, will_wait=rng.random() < 0.8).wait(30)
            assert log.durable_lsn >= end

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {r.lsn: r.payload for r in log.store.scan(FIRST_LSN)} == records
    assert log.stats["flushes"] < len(records)  # group commit: fewer flushes than commits
    log.close()
    dev.close()


@pytest.mark.parametrize("cls", [logbuffer.MutexLogBuffer, logbuffer.ConsolidatedLogBuffer])
def test_log_buffer_inserts_with_the_gil_held_when_uncontended(cls):
    buf = cls(1 << 16, 4096)
    lsns = [buf.insert(bytes([i]) * 64) for i in range(10)]
    assert lsns == [4096 + 64 * i for i in range(10)] and buf.released() == 4096 + 640
    assert buf.stats()["gil_held_inserts"] == 10
    assert buf.read(4096 + 64, 4096 + 72) == b"\1" * 8  # the LSN field is patched from byte 8
    buf.gil_fast_path = False  # the GIL-released path, as bench_logbuffer's Python rows measure
    buf.insert(bytes(64))
    assert buf.stats()["gil_held_inserts"] == 10 and buf.released() == 4096 + 704
    buf.gil_fast_path = True
    buf.mark_flushed(buf.released())
    while buf.reserved() + 64 - buf.flushed() <= buf.capacity:  # fill the ring: no space left
        buf.insert(bytes(64))
    held = buf.stats()["gil_held_inserts"]
    done = threading.Event()
    t = threading.Thread(target=lambda: (buf.insert(bytes(64)), done.set()))
    t.start()  # a full ring: the fast path declines and the insert waits with the GIL released
    assert not done.wait(0.2)
    buf.mark_flushed(buf.released())
    assert done.wait(10)
    t.join()
    assert buf.stats()["gil_held_inserts"] == held


def _expected(record: bytes, lsn: int) -> bytes:
    """A record as the log buffer stores it: its own LSN patched into bytes [8, 16)."""
    return record[:8] + lsn.to_bytes(8, "little") + record[16:]


@pytest.mark.parametrize("seed", range(3))
def test_direct_writer_tiles_the_region_across_wraps(tmp_path, seed):
    """``LogStore.append_from`` on an image file writes from the ring without the GIL
    (``DirectLogWriter``): random records and flush points over three laps of a small region,
    a fresh writer now and then (its head sector read back from the device): every record reads
    back exactly, and nothing before a flush's start is disturbed."""
    dev = create_image(str(tmp_path / "w.img"), 8 << 20)
    store = LogStore(dev, 8192, 1 << 20, seed=3)
    buf = logbuffer.MutexLogBuffer(256 << 10, FIRST_LSN + 100)  # starts mid-sector
    rng = random.Random(seed)
    written: list[tuple[int, bytes]] = []
    while buf.reserved() < FIRST_LSN + 3 * store.size:
        rec = rng.randbytes(rng.choice([16, 64, 120, 511, 512, 513, rng.randint(16, 60000)]))
        if buf.reserved() + len(rec) - buf.flushed() > buf.capacity:
            store.append_from(buf, buf.flushed(), buf.released())
            buf.mark_flushed(buf.released())
        written.append((buf.insert(rec), rec))
        if rng.random() < 0.3:
            start = buf.flushed()
            before = store.read(start - 300, 300)
            if rng.random() < 0.1:
                store = LogStore(dev, 8192, 1 << 20, seed=3)  # as after a reopen: no kept tail
            store.append_from(buf, start, buf.released())
            buf.mark_flushed(buf.released())
            assert store.read(start - 300, 300) == before
            lsn, rec = written[-1]
            assert store.read(lsn, len(rec)) == _expected(rec, lsn)
    store.append_from(buf, buf.flushed(), buf.released())
    assert type(store._direct).__name__ == "DirectLogWriter" and store._direct.appends > 0
    for lsn, rec in written:
        if lsn >= buf.released() - store.size + 4096:  # the last lap is intact as a whole
            assert store.read(lsn, len(rec)) == _expected(rec, lsn)
    dev.close()


def test_direct_writer_refuses_a_range_it_may_not_write(tmp_path):
    dev = create_image(str(tmp_path / "w.img"), 4 << 20)
    store = LogStore(dev, 8192, 1 << 20, seed=3)
    buf = logbuffer.MutexLogBuffer(64 << 10, FIRST_LSN)
    buf.insert(b"\x11" * 200)
    image = dev.read(0, 2 << 20)
    for start, end in ((FIRST_LSN, FIRST_LSN + 400), (FIRST_LSN - 8, FIRST_LSN + 200)):  # unreleased; flushed
        with pytest.raises(ValueError, match="outside the buffer's flushable range"):
            store.append_from(buf, start, end)
    assert dev.read(0, 2 << 20) == image  # nothing written
    dev.close()


def test_direct_writer_falls_back_when_the_device_refuses_the_alignment(tmp_path, loop_attach):
    """A descriptor whose device wants 4 KiB-aligned direct I/O refuses the writer's 512-byte
    sectors (EINVAL, nothing written): the store drops the direct path, the device stops offering
    it, and the same append goes through the buffered write + fdatasync path."""
    path = str(tmp_path / "f.img")
    create_image(path, 8 << 20).close()
    loop = loop_attach(path, sector_size=4096)
    dev = ImageFileDevice(path)
    dev._direct_fd = os.open(loop, os.O_RDWR | os.O_DIRECT | os.O_DSYNC)  # what direct_sync_fd offers
    store = LogStore(dev, 8192, 1 << 20, seed=3)
    buf = logbuffer.MutexLogBuffer(64 << 10, FIRST_LSN)
    lsn = buf.insert(b"\x22" * 300)
    store.append_from(buf, FIRST_LSN, buf.released())
    assert store._direct is False and dev.direct_sync_fd() is None and store.flush_path() == "python"
    assert store.read(lsn, 300) == _expected(b"\x22" * 300, lsn)
    dev.close()


def test_engine_commits_go_through_the_direct_writer(tmp_path):
    from kvpages import KV

    from traxfs.fs.engine.engine import Engine

    dev = create_image(str(tmp_path / "e.img"), 32 << 20)
    Engine.format(dev, log_size=2 << 20)
    eng = Engine.open(dev)
    kv = KV(eng, 10)
    for v in range(1, 6):
        tx = eng.begin()
        kv.put(tx, 3, v)
        eng.commit(tx)
    assert eng.store._direct.appends >= 5 and eng.stats()["log"]["flush_path"] == "direct"
    eng.unclean_shutdown()
    eng = Engine.open(dev)
    assert KV(eng, 10).get(3) == 5
    eng.close()
    dev.close()

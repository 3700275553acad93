"""The log manager under stress: concurrent inserts with both log buffers, through the real
flush path (daemon and leader flushes) into a small circular log region, read back by a scan.

Every record must appear exactly once, in LSN order, gap-free, with its own payload — across
many laps of the ring buffer and of the log region."""

from __future__ import annotations

import random
import threading

import pytest

from traxfs.fs.engine.logmanager import GroupCommitPolicy, LogManager
from traxfs.fs.engine.logrecord import RecType
from traxfs.fs.engine.logstore import FIRST_LSN, LogStore
from traxfs.volume.device import create_image


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["cd", "mutex"])
def test_concurrent_appends_tile_the_log(tmp_path, kind, seed):
    from traxfs.ext import logbuffer

    factory = {"cd": logbuffer.ConsolidatedLogBuffer, "mutex": logbuffer.MutexLogBuffer}[kind]
    dev = create_image(str(tmp_path / "log.img"), 8 << 20)
    store = LogStore(dev, 0, 1 << 20, seed=7)
    log = LogManager(store, FIRST_LSN, epoch=1, buffer_factory=factory, buffer_size=64 << 10,
                     policy=GroupCommitPolicy(max_commits=4, max_delay=0.0))
    written: dict[int, bytes] = {}
    lock = threading.Lock()
    laps = 3 * store.size  # bytes to write in all: three laps of the region, ~48 of the buffer

    def worker(w: int) -> None:
        rng = random.Random(w + 100 * seed)
        total = 0
        while total < laps // 8:
            size = rng.choice([16, 40, 200, 264, 1000, rng.randint(0, 3000)])
            payload = bytes([w]) * size
            lsn, end = log.append(RecType.UPDATE, xid=w + 1, payload=payload)
            with lock:
                written[lsn] = payload
            if rng.random() < 0.3:
                log.commit_handle(end).wait(10)
            log.trunc_lsn = max(log.trunc_lsn, log.durable_lsn - store.size // 2)  # keep half a lap
            total += end - lsn

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.flush_all()
    # records older than the truncation point may be overwritten; all the rest must scan back
    first = min(lsn for lsn in written if lsn >= log.trunc_lsn)
    got = {r.lsn: r.payload for r in store.scan(first)}
    assert got == {lsn: p for lsn, p in written.items() if lsn >= first}
    last = max(got)
    assert store.read_record(last).end == log.durable_lsn
    log.close()

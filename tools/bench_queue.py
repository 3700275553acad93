"""Queue benchmark: the queue store beside a plain file on the host filesystem, in one run.

``python -m traxfs.tools.bench_queue [--workdir DIR] [--records 2000000] [--json FILE]``

The in-process part (this module; the mount's part comes with the ``/queues`` subtree): a queue
store on an engine over a sparse image file in ``--workdir`` (a folder of the host filesystem),
and beside it the same bytes appended to / read from a plain file in that folder. Records are
100 bytes (99 and a newline), written in 128 KiB batches (1,310 records) as a producer's
``write`` calls deliver them.

* append, 1 producer, fsync never and every 64 MiB (``Queue.sync`` / ``os.fsync``);
* append, 4 producers (threads) into one queue / one ``O_APPEND`` file;
* consume from the first record in 128 KiB reads, 1 view, then 4 views at once (threads;
  records/s per view). Both sides read warm: the image and the file are in the host's page
  cache, and the store's blocks partly in its own cache;
* volume bytes of one queue with 1 view and with 4 views (engine pages in use);
* the process' peak RSS.

Python threads share one interpreter lock, so "4 producers" and "4 views" measure contention, not
parallel speed-up, on both sides alike.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import threading
import time
from pathlib import Path

from ..fs.engine.engine import Engine
from ..fs.engine.page import PAGE_SIZE
from ..fs.queues.config import QueueConfig
from ..fs.queues.reader import Reader
from ..fs.queues.store import QueueStore
from ..volume.device import ImageFileDevice, create_image

RECORD = 100
BATCH = 128 << 10
FSYNC_EVERY = 64 << 20
KEEP_ALL = QueueConfig(retain_age_seconds=None, retain_count=None)


def batch_bytes() -> bytes:
    """One 128 KiB write's worth of whole 100-byte records."""
    return (b"r" * (RECORD - 1) + b"\n") * (BATCH // RECORD)


def _rate(records: int, seconds: float) -> dict:
    return {"records": records, "seconds": round(seconds, 3), "records_per_s": round(records / seconds),
            "mb_per_s": round(records * RECORD / seconds / 1e6, 1)}


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


def _in_threads(work, counts: list[int]) -> float:
    """Run ``work(i, count)`` in one thread per count; the seconds until all are done."""
    threads = [threading.Thread(target=work, args=(i, n)) for i, n in enumerate(counts)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


# ----- the queue store ----------------------------------------------------------------------------
def store_append(store: QueueStore, name: bytes, batches: int, producers: int = 1, fsync: bool = False) -> dict:
    q = store.create(name, KEEP_ALL)
    data = batch_bytes()
    per_sync = FSYNC_EVERY // len(data)

    def produce(_: int, n: int) -> None:
        for i in range(1, n + 1):
            q.append(data)
            if fsync and i % per_sync == 0:
                q.sync()
        if fsync:
            q.sync()

    seconds = _in_threads(produce, _split(batches, producers))
    return _rate(batches * (len(data) // RECORD), seconds)


def store_consume(store: QueueStore, name: bytes, views: int) -> dict:
    q = store.get(name)
    got = [0] * views

    def consume(i: int, _: int) -> None:
        r = Reader(q, q.first_seq)
        try:
            while chunk := r.read(BATCH):
                got[i] += len(chunk)
        finally:
            r.close()

    seconds = _in_threads(consume, [0] * views)
    assert len(set(got)) == 1, f"views read different amounts: {got}"
    out = _rate(got[0] // RECORD, seconds)
    out["views"] = views
    return out


def view_bytes(eng: Engine, store: QueueStore, batches: int) -> dict:
    """Engine bytes one queue takes with 1 view and with 4 (the same records appended)."""
    data = batch_bytes()
    out = {}
    for views in (1, 4):
        free = eng.free_pages()
        q = store.create(f"views{views}".encode(), KEEP_ALL)
        for v in range(views):
            q.create_view(f"v{v}".encode())
        for _ in range(batches):
            q.append(data)
        q.sync()
        out[f"{views}_views_bytes"] = (free - eng.free_pages()) * PAGE_SIZE
    out["ratio_4_to_1"] = round(out["4_views_bytes"] / out["1_views_bytes"], 4)
    return out


# ----- the plain file -----------------------------------------------------------------------------
def file_append(path: Path, batches: int, producers: int = 1, fsync: bool = False) -> dict:
    data = batch_bytes()
    per_sync = FSYNC_EVERY // len(data)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)

    def produce(_: int, n: int) -> None:
        for i in range(1, n + 1):
            os.write(fd, data)
            if fsync and i % per_sync == 0:
                os.fsync(fd)
        if fsync:
            os.fsync(fd)

    try:
        seconds = _in_threads(produce, _split(batches, producers))
    finally:
        os.close(fd)
    return _rate(batches * (len(data) // RECORD), seconds)


def file_consume(path: Path, views: int) -> dict:
    got = [0] * views

    def consume(i: int, _: int) -> None:
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(BATCH):
                got[i] += len(chunk)

    seconds = _in_threads(consume, [0] * views)
    out = _rate(got[0] // RECORD, seconds)
    out["views"] = views
    return out


# ----- the run ------------------------------------------------------------------------------------
def run(workdir: Path, records: int) -> dict:
    batches = max(1, records // (BATCH // RECORD))
    image = workdir / "queue.img"
    plain = workdir / "plain.jsonl"
    size = 5 * batches * BATCH + (512 << 20)
    dev = create_image(str(image), size)
    Engine.format(dev, log_size=64 << 20)
    dev.close()
    eng = Engine.open(ImageFileDevice(str(image)))
    store = QueueStore(eng)
    results: dict = {"records_per_batch": BATCH // RECORD, "record_bytes": RECORD, "image_bytes": size}
    try:
        results["append_1p_nofsync"] = {"store": store_append(store, b"a1", batches),
                                         "file": file_append(plain, batches)}
        results["append_1p_fsync64M"] = {"store": store_append(store, b"a1s", batches, fsync=True),
                                          "file": file_append(plain, batches, fsync=True)}
        results["append_4p_nofsync"] = {"store": store_append(store, b"a4", batches, producers=4),
                                         "file": file_append(plain, batches, producers=4)}
        for views in (1, 4):
            results[f"consume_{views}v"] = {"store": store_consume(store, b"a1", views),
                                            "file": file_consume(plain, views)}
        for name in (b"a1", b"a1s", b"a4"):
            store.remove(name)
        results["volume_bytes"] = view_bytes(eng, store, max(1, batches // 4))
    finally:
        store.close()
        eng.close()
    results["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return results


def table(results: dict) -> str:
    rows = [f"{'workload':24s} {'store rec/s':>12s} {'MB/s':>7s} {'file rec/s':>12s} {'MB/s':>7s} {'store/file':>10s}"]
    for key, pair in results.items():
        if isinstance(pair, dict) and "store" in pair:
            s, f = pair["store"], pair["file"]
            rows.append(f"{key:24s} {s['records_per_s']:12,d} {s['mb_per_s']:7.1f} {f['records_per_s']:12,d} "
                        f"{f['mb_per_s']:7.1f} {s['records_per_s'] / f['records_per_s']:10.2f}")
    vb = results["volume_bytes"]
    rows.append(f"volume bytes: 1 view {vb['1_views_bytes']:,d}, 4 views {vb['4_views_bytes']:,d} "
                f"(x{vb['ratio_4_to_1']})")
    rows.append(f"peak RSS: {results['peak_rss_bytes'] / (1 << 20):.0f} MiB")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_queue", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, help="a folder on the host filesystem (default: a new temporary one)")
    ap.add_argument("--records", type=int, default=2_000_000, help="records per workload (default 2000000)")
    ap.add_argument("--json", type=Path, help="also write every number to this file")
    args = ap.parse_args(argv)
    own = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="bench_queue.")) if own else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        results = run(workdir, args.records)
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            for name in ("queue.img", "plain.jsonl"):
                (workdir / name).unlink(missing_ok=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

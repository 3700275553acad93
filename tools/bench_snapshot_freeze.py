"""Snapshot create time against the number and size of the tables and queues it freezes
(in process, on a sparse image file: the create call until it returns, durable).

``python -m traxfs.tools.bench_snapshot_freeze [--counts 0,10,100] [--rows 1000,100000]``

For each count ``K`` and size ``R``: a fresh filesystem with ``K`` tables of ``R`` rows and
``K`` queues of ``R`` records; five snapshots are taken and deleted, the median create time
reported. Expected: growing with ``K`` (one record per table and queue), flat in ``R``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from ..fs.filesystem import FileSystem
from ..fs.subtrees.protocol import subtree_ino
from ..volume.device import ImageFileDevice

MiB = 1 << 20
TOP = subtree_ino(2, 1)


def one(workdir: Path, count: int, rows: int) -> float:
    path = workdir / f"fs-{count}-{rows}.img"
    dev = ImageFileDevice(str(path), 1024 * MiB, create=True)
    FileSystem.mkfs(dev, log_size=32 * MiB)
    fs = FileSystem.open(dev)
    try:
        queues = fs.queues._made_store()
        tables = fs._root_names[b"tables"].store
        for i in range(count):
            t = tables.create(b"t%d" % i, "id int64, name string")
            tables.append(t, [list(range(rows)), [f"row {j}" for j in range(rows)]])
            q = queues.create(b"q%d" % i)
            for start in range(0, rows, 10_000):
                q.append(b"".join(b'{"n": %d}\n' % j for j in range(start, min(rows, start + 10_000))))
        times = []
        for k in range(5):
            t0 = time.perf_counter()
            fs.mkdir(TOP, b"s%d" % k, 0o755, 0, 0)
            times.append(time.perf_counter() - t0)
            fs.rmdir(TOP, b"s%d" % k)
        return statistics.median(times)
    finally:
        fs.close()
        path.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="0,10,100")
    ap.add_argument("--rows", default="1000,100000")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.workdir) as d:
        print(f"{'tables+queues':>14} {'rows each':>10} {'create ms (median of 5)':>24}")
        for count in map(int, a.counts.split(",")):
            for rows in map(int, a.rows.split(",")):
                print(f"{count:>14} {rows:>10} {one(Path(d), count, rows) * 1000:>24.1f}", flush=True)


if __name__ == "__main__":
    main()

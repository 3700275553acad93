"""Engine benchmarks, side by side with SQLite (standard library) in one run.

* ``durable``: single-update durable transactions from 1 and 8 concurrent clients, ``--repeat``
  runs of each store interleaved, medians reported (the device's flush latency drifts by ±20%
  over seconds here). traxfs: one
  8-byte cell per key, incremented under a lock, ``commit()`` waits for the commit record to be on
  disk (group commit gathers concurrent commits into one fsync). SQLite: WAL mode,
  ``synchronous=FULL``, one connection per client, ``UPDATE`` + ``COMMIT`` per transaction.
* ``bulk``: 200,000 inserts (8-byte key → 100-byte value) in one transaction with a durable
  commit, into the engine's linear hash and B+tree one ``put()`` at a time, and into a new
  hash and a new B+tree with ``bulk_create()`` — vs SQLite (WAL, synchronous=FULL) inserting the same rows into
  a WITHOUT ROWID table in one transaction.
* ``ops`` (``--ops N``, alone): the cost of one B+tree operation — N puts of new random keys,
  N gets, N overwrites, N deletes, each phase in one transaction — in microseconds, beside
  SQLite running the same statements one at a time in one transaction, and, with
  ``--before DIR``, beside the engine of the traxfs package in ``DIR/traxfs`` (the code before
  a change). Each store runs in a child process of its own; ``--repeat`` rounds are
  interleaved and the medians reported.

Both stores live in files in the same folder on the same filesystem, and both run inside this
process: the last line is its peak resident memory (engines' buffer pools and SQLite's cache
alike). Run:
``python -m traxfs.tools.bench_engine [--workdir DIR] [--seconds S] [--json]``, or
``python -m traxfs.tools.bench_engine --ops 30000 [--before DIR] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

from ..fs.engine import opcodes
from ..fs.engine.engine import Engine
from ..fs.engine.page import PAGE_SIZE, PageType
from ..fs.process_status import process_status
from ..volume.device import create_image
from .before import checkout_problem, child_env

KEYS = 4000
CELLS_PER_PAGE = 500
_U64 = struct.Struct("<Q")


def _engine(workdir: str, size: int = 512 << 20) -> Engine:
    path = os.path.join(workdir, "engine.img")
    if os.path.exists(path):
        os.unlink(path)
    dev = create_image(path, size)
    Engine.format(dev, log_size=64 << 20)
    return Engine.open(dev)


class Cells:
    """KEYS u64 cells on pages: the engine side of the durable-update benchmark."""

    def __init__(self, eng: Engine):
        self.eng = eng
        tx = eng.begin()
        pages = -(-KEYS // CELLS_PER_PAGE)
        self.base = eng.alloc_region(tx, pages)
        free = bytes(PAGE_SIZE)  # a page just allocated: its old bytes do not matter (``fresh``)
        for p in range(pages):
            eng.update(tx, self.base + p, opcodes.OP_IMAGE, opcodes.image_payload(free, PageType.FIXED, 8, b""),
                       fresh=True)
        eng.commit(tx)

    def increment(self, k: int) -> None:
        """``UPDATE kv SET v = v + 1 WHERE k = ?`` as one durable transaction: the row lock, then
        the engine's increment operation (Stasis' ``Tincrement``; like SQLite's ``v + 1`` it
        reads and changes the cell inside the engine, under the page latch)."""
        eng = self.eng
        tx = eng.begin()
        eng.lock(tx, k)
        pid, off = self._where(k)
        eng.update(tx, pid, opcodes.OP_ADD, opcodes.add_payload(off, 1))
        eng.commit(tx)

    def value(self, k: int) -> int:
        pid, off = self._where(k)
        with self.eng.page(pid) as f:
            return _U64.unpack_from(f.data, off)[0]

    def _where(self, k: int) -> tuple[int, int]:
        """Key ``k``'s cell: (page, byte offset)."""
        return self.base + k // CELLS_PER_PAGE, 64 + 8 * (k % CELLS_PER_PAGE)


def _run_clients(clients: int, seconds: float, make_worker) -> tuple[float, int]:
    """Run ``clients`` threads for ``seconds``; return (transactions per second, transactions)."""
    stop = time.monotonic() + seconds
    counts = [0] * clients

    def loop(c: int) -> None:
        work = make_worker(c)
        rng = random.Random(c)
        while time.monotonic() < stop:
            work(rng.randrange(KEYS // clients) * clients + c)  # disjoint keys: no lock waits
            counts[c] += 1

    threads = [threading.Thread(target=loop, args=(c,)) for c in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - t0), sum(counts)


def bench_durable(workdir: str, seconds: float, repeat: int = 3) -> list[dict]:
    rows = []
    eng = _engine(workdir)
    cells = Cells(eng)
    db = os.path.join(workdir, "bench.sqlite")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.unlink(db + suffix)
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE kv (k INTEGER PRIMARY KEY, v INTEGER)")
    con.executemany("INSERT INTO kv VALUES (?, 0)", ((k,) for k in range(KEYS)))
    con.commit()
    con.close()

    def sqlite_worker(_c: int):
        c = sqlite3.connect(db, timeout=60, isolation_level=None, check_same_thread=False)
        c.execute("PRAGMA synchronous=FULL")
        c.execute("PRAGMA busy_timeout=60000")

        def work(k: int) -> None:
            c.execute("BEGIN IMMEDIATE")
            c.execute("UPDATE kv SET v = v + 1 WHERE k = ?", (k,))
            c.execute("COMMIT")
        return work

    done = 0
    for clients in (1, 8):
        ours, theirs, commits, flushes = [], [], 0, 0
        for _ in range(repeat):  # interleaved: both see the same drift of the device's flush latency
            flushes0 = eng.stats()["log"]["flushes"]
            t, n = _run_clients(clients, seconds, lambda _c: cells.increment)
            flushes += eng.stats()["log"]["flushes"] - flushes0
            commits += n
            ours.append(t)
            theirs.append(_run_clients(clients, seconds, sqlite_worker)[0])
        done += commits
        counted = sum(cells.value(k) for k in range(KEYS))
        if counted != done:  # every acknowledged increment must be in the cells, exactly once
            raise RuntimeError(f"traxfs cells sum to {counted}, but {done} increments were committed")
        t, s = statistics.median(ours), statistics.median(theirs)
        rows.append({"test": f"durable 1-update txns, {clients} client(s)", "traxfs_tps": round(t),
                     "sqlite_tps": round(s), "ratio": round(t / s, 2),
                     "traxfs_runs": [round(x) for x in ours], "sqlite_runs": [round(x) for x in theirs],
                     "traxfs_commits_per_fsync": round(commits / max(flushes, 1), 1)})
    eng.close()
    return rows


def bench_bulk(workdir: str, n: int) -> list[dict]:
    """n inserts of 8-byte keys → 100-byte values in one transaction, durable commit."""
    from ..fs.struct.btree import BTree
    from ..fs.struct.linearhash import LinearHash

    rng = random.Random(42)
    keys = [struct.pack(">Q", rng.getrandbits(64)) for _ in range(n)]
    value = bytes(100)
    rows = []
    path = os.path.join(workdir, "bulk.img")
    for bulk in (False, True):
        for name, cls in (("linear hash", LinearHash), ("B+tree", BTree)):
            if os.path.exists(path):
                os.unlink(path)
            dev = create_image(path, 2 << 30)
            Engine.format(dev, log_size=(64 if bulk else 512) << 20)
            eng = Engine.open(dev, buffer_pages=16384)
            if not bulk:
                tx = eng.begin()
                s = cls.create(eng, tx, "bench")
                eng.commit(tx)
            start_lsn = eng.next_lsn()
            t0 = time.perf_counter()
            tx = eng.begin()
            if bulk:  # Stasis' logging opt-out: fresh pages written and forced, then commit
                cls.bulk_create(eng, tx, ((k, value) for k in keys), "bench")
            else:
                for k in keys:
                    s.put(tx, k, value)
            eng.commit(tx)
            t = time.perf_counter() - t0
            log_bytes = eng.next_lsn() - start_lsn
            eng.close()
            dev.close()
            os.unlink(path)
            how = "bulk_create() (unlogged fresh pages, forced)" if bulk else "one put() per row"
            rows.append({"structure": f"{name}, {how}", "seconds": t, "inserts_per_s": n / t,
                         "log_MB": log_bytes / 1e6})
    db = os.path.join(workdir, "bulk.sqlite")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.unlink(db + suffix)
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
    t0 = time.perf_counter()
    con.execute("BEGIN")
    con.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", ((k, value) for k in keys))
    con.execute("COMMIT")
    t = time.perf_counter() - t0
    con.close()
    rows.append({"structure": "SQLite (WAL, synchronous=FULL, WITHOUT ROWID b-tree)", "seconds": t,
                 "inserts_per_s": n / t, "log_MB": 0})
    return rows


# one store's operation loop, run in a child process (``python -c``) so that another checkout's
# engine can be measured beside this one: only the engine's public face is used
_OPS_CHILD = r"""
import json, os, random, sqlite3, struct, sys, time
n, store, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rng = random.Random(42)
keys = [struct.pack(">Q", rng.getrandbits(64)) for _ in range(n)]
value, other = bytes(100), b"\1" * 100
out = {}
def timed(name, fn):
    t0 = time.perf_counter()
    for k in keys:
        fn(k)
    out[name] = (time.perf_counter() - t0) / n * 1e6
if store == "sqlite":
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
    for name, sql, args in (("put", "INSERT INTO kv VALUES (?, ?)", lambda k: (k, value)),
                            ("get", "SELECT v FROM kv WHERE k = ?", lambda k: (k,)),
                            ("overwrite", "UPDATE kv SET v = ? WHERE k = ?", lambda k: (other, k)),
                            ("delete", "DELETE FROM kv WHERE k = ?", lambda k: (k,))):
        con.execute("BEGIN")
        if name == "get":
            timed(name, lambda k: con.execute(sql, args(k)).fetchone())
        else:
            timed(name, lambda k: con.execute(sql, args(k)))
        con.execute("COMMIT")
    con.close()
else:
    from traxfs.fs.engine.engine import Engine
    from traxfs.fs.struct.btree import BTree
    from traxfs.volume.device import create_image
    dev = create_image(path, 1 << 30)
    Engine.format(dev, log_size=256 << 20)
    eng = Engine.open(dev, buffer_pages=16384)
    tx = eng.begin()
    tree = BTree.create(eng, tx, "ops")
    eng.commit(tx)
    for name, fn in (("put", lambda k: tree.put(tx, k, value)), ("get", tree.get),
                     ("overwrite", lambda k: tree.put(tx, k, other)), ("delete", lambda k: tree.delete(tx, k))):
        tx = eng.begin()
        timed(name, fn)
        eng.commit(tx)
    eng.close()
    dev.close()
print(json.dumps(out))
"""


def bench_ops(workdir: str, n: int, repeat: int, before: str | None) -> dict:
    """Microseconds per B+tree operation for each store (medians of ``repeat`` interleaved
    rounds, each store in a child process)."""
    stores = {"traxfs": None, "sqlite": None}
    if before:
        stores["before"] = before
    runs: dict[str, list[dict]] = {s: [] for s in stores}
    for _ in range(repeat):
        for store, pythonpath in stores.items():
            path = os.path.join(workdir, f"ops-{store}.db")
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.unlink(path + suffix)
            env = child_env(pythonpath)
            kind = "sqlite" if store == "sqlite" else "engine"
            r = subprocess.run([sys.executable, "-c", _OPS_CHILD, str(n), kind, path], env=env,
                               capture_output=True, text=True, check=False)
            if r.returncode:
                raise RuntimeError(f"ops benchmark of {store} failed: {r.stderr.strip()[-2000:]}")
            runs[store].append(json.loads(r.stdout))
            os.unlink(path)
    return {s: {op: statistics.median(run[op] for run in rs) for op in rs[0]} for s, rs in runs.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", help="folder for the files (default: a temporary folder)")
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each timed run")
    ap.add_argument("--repeat", type=int, default=3,
                    help="durable runs per store and client count, interleaved; medians are reported")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--bulk", type=int, default=200_000, help="inserts in the bulk test (0: skip it)")
    ap.add_argument("--ops", type=int, default=0, metavar="N",
                    help="instead: microseconds per B+tree put, get, overwrite and delete (N keys) beside SQLite")
    ap.add_argument("--before", help="with --ops: also the engine of the traxfs package in BEFORE/traxfs")
    a = ap.parse_args(argv)
    if a.before and not a.ops:
        ap.error("--before goes with --ops")
    if a.before and (problem := checkout_problem(a.before, "fs/struct/btree.py")):
        ap.error(problem)
    if a.ops < 0:
        ap.error("--ops N: N must be positive")
    work = a.workdir or tempfile.mkdtemp(prefix="trax-bench-engine-")
    os.makedirs(work, exist_ok=True)
    if a.ops:
        try:
            ops = bench_ops(work, a.ops, a.repeat, a.before)
        finally:
            if not a.workdir:
                shutil.rmtree(work, ignore_errors=True)
        if a.json:
            print(json.dumps({"ops": ops, "keys": a.ops, "repeat": a.repeat}, indent=2))
            return 0
        print(f"microseconds per operation, {a.ops} random 8-byte keys -> 100-byte values, each phase one "
              f"transaction, medians of {a.repeat}")
        print(f"{'store':<8}" + "".join(f"{op:>11}" for op in ops["traxfs"]))
        for store, row in ops.items():
            print(f"{store:<8}" + "".join(f"{v:>11.2f}" for v in row.values()))
        return 0
    try:
        rows = bench_durable(work, a.seconds, a.repeat)
        bulk = bench_bulk(work, a.bulk) if a.bulk else []
    finally:
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)
    proc = process_status()
    if a.json:
        print(json.dumps({"durable": rows, "bulk": bulk, "process": proc}, indent=2))
    else:
        for r in rows:
            print(f"{r['test']:<40} traxfs {r['traxfs_tps']:>8} tps   sqlite {r['sqlite_tps']:>8} tps   "
                  f"ratio {r['ratio']:>5}   commits/fsync {r['traxfs_commits_per_fsync']}   "
                  f"(runs: traxfs {r['traxfs_runs']}, sqlite {r['sqlite_runs']})")
        for r in bulk:
            print(f"bulk {a.bulk} inserts, one durable transaction: {r['structure']:<55} "
                  f"{r['seconds']:7.2f} s  {r['inserts_per_s']:>9.0f} inserts/s  log {r['log_MB']:.0f} MB")
        print(f"peak RSS of this process (both stores): {proc['peak_rss_bytes'] / (1 << 20):.0f} MiB; "
              f"CPU {proc['cpu_user_s']:.1f} s user, {proc['cpu_system_s']:.1f} s system")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

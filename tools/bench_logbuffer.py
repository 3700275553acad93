"""Log-insert microbenchmark: Aether's CD log buffer against the single-mutex baseline.

    python -m traxfs.tools.bench_logbuffer [--seconds S] [--repeat N] [--threads 1,2,8]
                                           [--record-size 120] [--capacity 8M] [--no-native] [--json]

Digest ``aether.md`` §7 ("log-insert microbenchmark: inserts only") and §9 item 11, scaled down to
this machine.  Every configuration inserts fixed ``--record-size`` byte records (120 B, the
paper's average) from 1, 2 and 8 threads for ``--seconds``, while one flusher thread consumes the
log (``read`` + ``mark_flushed``, no disk), so inserts never stall for long on ring space.

Two drivers, both in one run:

* ``python`` -- Python threads calling ``insert`` with the GIL released inside every insert.  The insert
  itself runs with the GIL released, but each thread needs the GIL between two inserts, so this
  measures the buffer *plus* CPython's GIL hand-offs.  The report gives the single-thread cost per
  insert next to the native one, and the call overhead of a trivial extension method.
* ``py-held`` -- the same Python threads with the buffer's GIL-held path on (``gil_fast_path``, what
  the engine's log manager uses): an insert that finds the buffer free completes without releasing
  the GIL, so Python threads pay no GIL hand-off per insert; only a contended or full buffer falls
  back to the algorithm with the GIL released.
* ``native`` -- the same buffers driven by pthreads inside the extension (``_native_bench``), with
  no GIL anywhere: the algorithms themselves on this machine's cores.

Implementations: ``mutex`` (Algorithm 1), ``cd`` (consolidation array + decoupled fill with
in-order release: the paper's CD, the default ``ConsolidatedLogBuffer``), ``cd-locked`` (CD whose
uncontended try-lock path keeps the mutex through fill and release) and ``cd-deleg`` (CD with
CDME-style delegated release); see the module docstring of ``traxfs.ext.logbuffer``.  Each
configuration runs ``--repeat`` times, interleaved, and the median is reported (MB = 10^6 bytes).
``vs mutex`` is inserts/s divided by the mutex baseline's for the same driver and thread count;
``csw/insert`` is the process's context switches (``getrusage``, all threads) per insert; ``groups``
the average records per consolidation group.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import statistics
import sys
import threading
import time

from ..ext.logbuffer import ConsolidatedLogBuffer, MutexLogBuffer
from ..ext.logbuffer_drivers import _native_bench

IMPLS = {
    "mutex": MutexLogBuffer,
    "cd": ConsolidatedLogBuffer,
    "cd-locked": functools.partial(ConsolidatedLogBuffer, fast_path="locked"),
    "cd-deleg": functools.partial(ConsolidatedLogBuffer, release="delegated"),
}
BATCH = 64  # inserts between two looks at the stop flag


def parse_size(text: str) -> int:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        return int(float(num) * units[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None


def make_record(size: int) -> bytes:
    """A record in the test format: [u32 len][u32 0][u64 lsn slot] + payload."""
    if size < 16:
        raise ValueError("records are at least 16 bytes")
    return size.to_bytes(4, "little") + bytes(12) + bytes(range(256)) * (size // 256) + bytes(size % 256)


def _ctx_switches() -> int:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_nvcsw + ru.ru_nivcsw


def run_python(impl: str, threads: int, record: bytes, seconds: float, capacity: int, held: bool = False) -> dict:
    buf = IMPLS[impl](capacity, 0)
    buf.gil_fast_path = held  # False: every insert releases the GIL and runs the algorithm
    stop = threading.Event()
    go = threading.Barrier(threads + 1)
    counts = [0] * threads
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            ins = buf.insert
            n = 0
            go.wait()
            while not stop.is_set():
                for _ in range(BATCH):
                    ins(record)
                n += BATCH
            counts[i] = n
        except BaseException as e:  # noqa: BLE001 - reported after the run
            errors.append(e)

    def flusher() -> None:
        try:
            f = buf.flushed()
            chunk = capacity // 4  # wake for a quarter ring (or 5 ms), not for every record
            while True:
                r = buf.wait_released(f + chunk, 0.005)
                if r > f:
                    buf.read(f, r)
                    buf.mark_flushed(r)
                    f = r
                elif stop.is_set() and not any(t.is_alive() for t in workers):
                    return
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    fl = threading.Thread(target=flusher, daemon=True)
    fl.start()
    for t in workers:
        t.start()
    cs0 = _ctx_switches()
    go.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in workers:
        t.join()
    elapsed = time.perf_counter() - t0
    cs1 = _ctx_switches()
    fl.join(timeout=30)
    if errors:
        raise RuntimeError(f"{impl} x{threads}: {errors[0]!r}") from errors[0]
    if buf.released() != buf.reserved():
        raise RuntimeError(f"{impl} x{threads}: released {buf.released()} != reserved {buf.reserved()}")
    inserts = sum(counts)
    return {"inserts": inserts, "bytes": inserts * len(record), "seconds": elapsed,
            "ctx_switches": cs1 - cs0, "stats": buf.stats()}


def run_native(impl: str, threads: int, record: bytes, seconds: float, capacity: int) -> dict:
    buf = IMPLS[impl](capacity, 0)
    cs0 = _ctx_switches()
    res = _native_bench(buf, threads, record, seconds)
    res["ctx_switches"] = _ctx_switches() - cs0
    if res["violations"]:
        raise RuntimeError(f"{impl} x{threads} native: {res['violations']} watermark violations")
    res["stats"] = buf.stats()
    return res


def call_overhead(n: int = 200_000) -> float:
    """ns per call of a trivial method of the extension from a Python loop (no insert work)."""
    buf = MutexLogBuffer(1 << 16, 0)
    f = buf.released
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t0) / n * 1e9


def bench(seconds: float, repeat: int, thread_counts: list[int], record_size: int, capacity: int,
          native: bool, progress=None) -> dict:
    record = make_record(record_size)
    load_at_start = os.getloadavg()
    drivers = [("python", run_python), ("py-held", functools.partial(run_python, held=True))] \
        + ([("native", run_native)] if native else [])
    samples: dict[tuple[str, str, int], list[dict]] = {}
    for rep in range(repeat):
        for dname, fn in drivers:
            for threads in thread_counts:
                for impl in IMPLS:
                    if progress:
                        progress(f"[{rep + 1}/{repeat}] {dname:6} {impl:9} x{threads}")
                    samples.setdefault((dname, impl, threads), []).append(
                        fn(impl, threads, record, seconds, capacity))
    rows = []
    for (dname, impl, threads), runs in samples.items():
        rates = [r["inserts"] / r["seconds"] for r in runs]
        med = statistics.median(rates)
        row = {
            "driver": dname, "impl": impl, "threads": threads,
            "inserts_per_s": med, "mb_per_s": med * record_size / 1e6,
            "min_inserts_per_s": min(rates), "max_inserts_per_s": max(rates),
            "runs": len(runs),
        }
        ins = sum(r["inserts"] for r in runs)
        row["ctx_switches_per_insert"] = sum(r["ctx_switches"] for r in runs) / max(ins, 1)
        st = runs[-1]["stats"]
        if impl != "mutex":
            n = max(runs[-1]["inserts"], 1)
            row["fast_path_share"] = st["fast_path_inserts"] / n
            row["avg_group_records"] = (st["group_bytes"] / record_size / st["groups"]) if st["groups"] else 0.0
        rows.append(row)
    base = {(r["driver"], r["threads"]): r["inserts_per_s"] for r in rows if r["impl"] == "mutex"}
    for r in rows:
        r["ratio_vs_mutex"] = r["inserts_per_s"] / base[(r["driver"], r["threads"])]
    single = {(r["driver"], r["impl"]): 1e9 / r["inserts_per_s"] for r in rows if r["threads"] == 1}
    return {
        "command": "python -m traxfs.tools.bench_logbuffer " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_at_start": load_at_start, "switch_interval_s": sys.getswitchinterval()},
        "record_size": record_size, "capacity": capacity, "seconds": seconds, "repeat": repeat,
        "python_call_overhead_ns": call_overhead(),
        "ns_per_insert_1_thread": {f"{d}/{i}": v for (d, i), v in single.items()},
        "rows": rows,
    }


def render(doc: dict) -> str:
    out = [f"log insert, {doc['record_size']} B records, ring {doc['capacity'] >> 20} MiB, "
           f"{doc['seconds']} s x {doc['repeat']} runs (median), {doc['machine']['cpus']} CPUs, "
           f"load avg at start {doc['machine']['loadavg_at_start'][0]:.2f}",
           "",
           f"{'driver':7} {'threads':>7} {'impl':10} {'inserts/s':>12} {'MB/s':>9} {'vs mutex':>9} "
           f"{'min..max inserts/s':>22} {'csw/insert':>10} {'groups':>7}"]
    order = ["python", "py-held", "native"]
    for r in sorted(doc["rows"], key=lambda r: (order.index(r["driver"]), r["threads"], list(IMPLS).index(r["impl"]))):
        csw = f"{r['ctx_switches_per_insert']:.3f}"
        grp = f"{r['avg_group_records']:.1f}" if r.get("avg_group_records") else "-"
        spread = f"{r['min_inserts_per_s'] / 1e3:,.0f}k..{r['max_inserts_per_s'] / 1e3:,.0f}k"
        out.append(f"{r['driver']:7} {r['threads']:>7} {r['impl']:10} {r['inserts_per_s']:>12,.0f} "
                   f"{r['mb_per_s']:>9.1f} {r['ratio_vs_mutex']:>8.2f}x {spread:>22} {csw:>10} {grp:>7}")
    out.append("")
    ns = doc["ns_per_insert_1_thread"]
    out.append("single thread, ns per insert: " + ", ".join(f"{k} {v:.0f}" for k, v in ns.items()))
    out.append(f"python call overhead of a trivial extension method: {doc['python_call_overhead_ns']:.0f} ns")
    out.append("groups = average records per consolidation group (CD, last run); csw = context switches")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m traxfs.tools.bench_logbuffer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="duration of one configuration (default 1.0)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per configuration, median reported (default 3)")
    ap.add_argument("--threads", default="1,2,8", help="comma-separated thread counts (default 1,2,8)")
    ap.add_argument("--record-size", type=int, default=120, help="record bytes (default 120)")
    ap.add_argument("--capacity", type=parse_size, default=8 << 20, help="ring size (default 8M)")
    ap.add_argument("--no-native", action="store_true", help="skip the pthread (no GIL) driver")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args(argv)
    try:
        threads = [int(x) for x in args.threads.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--threads: not a list of integers: {args.threads!r}")
    if not threads or min(threads) < 1 or args.seconds <= 0 or args.repeat < 1:
        ap.error("--threads, --seconds and --repeat must be positive")
    if not 16 <= args.record_size <= args.capacity // 2:
        ap.error("--record-size must be in 16..capacity/2")

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    doc = bench(args.seconds, args.repeat, threads, args.record_size, args.capacity, not args.no_native,
                progress=None if args.json else progress)
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Queue benchmark through the mount: ``/queues`` beside a plain file on the same mount and a plain
file on the host filesystem, in one run.

``python -m traxfs.tools.bench_queue_mount [--workdir DIR] [--records 1000000] [--json FILE]``

A traxfs image in ``--workdir`` (a folder of the host filesystem) is made and mounted by the
real ``trax mount --foreground`` daemon. Records are 100 bytes (99 and a newline), written in
128 KiB ``write`` calls (1,310 records), as ``cat`` would:

* append, 1 producer, fsync never and every 64 MiB; 4 producers (threads, each its own open),
  fsync never — to ``/queues/NAME/append``, to a plain file on the mount (``O_APPEND``), and to a
  plain file on the host;
* consume in 128 KiB reads, 1 view, then 4 views at once (threads; records/s per view) — from
  ``views/V/records``, and the two plain files read from the start as often;
* append -> visible latency: one producer appends a record (stamped with its time) every
  millisecond, a view reader polls its ``records`` (0.2 ms sleep at the live end); median and p99;
* volume bytes of the same records in a queue with 1 view and in one with 4 (``statvfs``);
* the daemon's peak RSS (``psutil``, sampled, and the kernel's high-water mark ``VmHWM``);
* with ``--spark``: append -> Structured Streaming latency — a record stamped with its time every
  50 ms, segments sealed every 0.1 s, a query over ``segments/`` triggered every 100 ms noting in
  ``foreachBatch`` when each record reaches it (after one warm-up record); median and p99.

FUSE costs a round trip per request: the ``append`` file and ``records`` are ``direct_io`` (no
page cache), so every 128 KiB write and read is one request to the daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from .bench_queue import BATCH, FSYNC_EVERY, RECORD, _in_threads, _rate, _split, batch_bytes

PER_BATCH = BATCH // RECORD


# ----- the mount ------------------------------------------------------------------------------------
class Daemon:
    """``trax mount --foreground`` of an image, and its memory watched."""

    def __init__(self, workdir: Path, size: int):
        self.home, self.image, self.mp = workdir / "home", workdir / "fs.img", workdir / "mnt"
        self.mp.mkdir(exist_ok=True)
        self.log = open(workdir / "mount.log", "ab")  # noqa: SIM115  (open for the daemon's life)
        self._trax("mkfs", str(self.image), "--size", str(size))
        pidfile = workdir / "mount.pid"
        self.proc = subprocess.Popen([sys.executable, "-m", "traxfs.tools.cli", "--home", str(self.home), "mount",
                                      "--foreground", "--pidfile", str(pidfile), str(self.image), str(self.mp)],
                                     stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and os.path.ismount(self.mp)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the mount did not come up; see {workdir / 'mount.log'}")
            time.sleep(0.02)
        self.ps = psutil.Process(self.proc.pid)
        self.peak_rss = 0
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _trax(self, *args: str) -> None:
        subprocess.run([sys.executable, "-m", "traxfs.tools.cli", "--home", str(self.home), *args], check=True,
                       capture_output=True, timeout=120)

    def _sample(self) -> None:
        while not self._done.wait(0.05):
            try:
                self.peak_rss = max(self.peak_rss, self.ps.memory_info().rss)
            except psutil.Error:
                return

    def hwm(self) -> int:
        """The kernel's high-water mark of the daemon's resident memory (bytes)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        self._done.set() if hasattr(self, "_done") else None
        if os.path.ismount(self.mp):
            subprocess.run(["fusermount3", "-u", str(self.mp)], capture_output=True)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


# ----- producers and consumers ---------------------------------------------------------------------
def append_to(path: Path, batches: int, producers: int = 1, fsync: bool = False) -> dict:
    data = batch_bytes()

    def produce(_: int, n: int) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        since = 0
        try:
            for _ in range(n):
                os.write(fd, data)
                since += len(data)
                if fsync and since >= FSYNC_EVERY:
                    os.fsync(fd)
                    since = 0
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    return _rate(batches * PER_BATCH, _in_threads(produce, _split(batches, producers)))


def consume(paths: list[Path], records: int) -> dict:
    """Read each path to its end (or ``records`` records) at once; records/s per reader."""
    want = records * RECORD

    def read(i: int, _: int) -> None:
        fd = os.open(paths[i], os.O_RDONLY)
        got = 0
        try:
            while got < want and (chunk := os.read(fd, BATCH)):
                got += len(chunk)
        finally:
            os.close(fd)

    out = _rate(records, _in_threads(read, [0] * len(paths)))
    out["readers"] = len(paths)
    return out


def latency(qdir: Path, count: int = 2000, every: float = 0.001) -> dict:
    """Append one stamped record every ``every`` s; a view reader measures when it sees each."""
    os.mkdir(qdir / "views" / "lat")
    seen: list[float] = []
    done = threading.Event()

    def reader() -> None:
        fd = os.open(qdir / "views" / "lat" / "records", os.O_RDONLY)
        rest = b""
        try:
            while len(seen) < count:
                chunk = os.read(fd, BATCH)
                if not chunk:
                    if done.is_set() and len(seen) >= count:
                        break
                    time.sleep(0.0002)
                    continue
                now = time.perf_counter()
                data = rest + chunk
                cut = data.rfind(b"\n") + 1
                seen.extend(now - float(line) for line in data[:cut].split(b"\n")[:-1])
                rest = data[cut:]
        finally:
            os.close(fd)

    t = threading.Thread(target=reader)
    t.start()
    fd = os.open(qdir / "append", os.O_WRONLY)
    try:
        for _ in range(count):
            os.write(fd, f"{time.perf_counter():.9f}\n".encode())
            time.sleep(every)
    finally:
        os.close(fd)
        done.set()
    t.join(60)
    ms = sorted(s * 1000 for s in seen)
    return {"records": len(ms), "median_ms": round(statistics.median(ms), 3),
            "p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 3), "max_ms": round(ms[-1], 3)}


def streaming_latency(qdir: Path, count: int = 300, every: float = 0.05) -> dict:
    """Append one stamped record every ``every`` s to a queue sealing segments every 0.1 s; a
    Structured Streaming query over its ``segments/`` (trigger every 100 ms) notes when each
    reaches a batch of the query (``foreachBatch``, in this process)."""
    from .spark_job import session, stop

    with open(qdir / "config.json", "w") as f:
        f.write('{"seal_seconds": 0.1}')
    spark = session()
    seen: list[float] = []

    def batch(df, _id) -> None:
        now = time.time()
        seen.extend(now - r.t for r in df.select("t").collect())

    query = (spark.readStream.schema("t DOUBLE, i LONG").json(str(qdir / "segments")).writeStream
             .foreachBatch(batch).trigger(processingTime="100 milliseconds").start())
    try:
        fd = os.open(qdir / "append", os.O_WRONLY)
        try:
            os.write(fd, json.dumps({"t": time.time(), "i": -1}).encode() + b"\n")  # warm-up: the query's
            deadline = time.monotonic() + 120  # first batch plans and starts its tasks
            while not seen and time.monotonic() < deadline:
                time.sleep(0.05)
            seen.clear()
            for i in range(count):
                os.write(fd, json.dumps({"t": time.time(), "i": i}).encode() + b"\n")
                time.sleep(every)
        finally:
            os.close(fd)
        deadline = time.monotonic() + 60
        while len(seen) < count and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        query.stop()
        stop(spark)
    ms = sorted(s * 1000 for s in seen)
    return {"records": len(ms), "median_ms": round(statistics.median(ms), 1),
            "p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 1), "max_ms": round(ms[-1], 1),
            "seal_seconds": 0.1, "trigger_ms": 100}


def volume_bytes(mp: Path, batches: int) -> dict:
    """The same records in a queue with 1 view and in one with 4: the volume's bytes used."""
    out = {}
    for views in (1, 4):
        qdir = mp / "queues" / f"vb{views}"
        before = _used(mp)
        os.mkdir(qdir)
        for v in range(views):
            os.mkdir(qdir / "views" / f"v{v}")
        append_to(qdir / "append", batches, fsync=True)
        os.sync()
        out[f"{views}_views_bytes"] = _used(mp) - before
    out["ratio_4_to_1"] = round(out["4_views_bytes"] / out["1_views_bytes"], 3)
    return out


def _used(mp: Path) -> int:
    st = os.statvfs(mp)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


# ----- the run ----------------------------------------------------------------------------------------
def run(workdir: Path, records: int, spark: bool = False) -> dict:
    batches = max(1, records // PER_BATCH)
    n = batches * PER_BATCH
    size = 12 * batches * BATCH + (1 << 30)
    d = Daemon(workdir, size)
    host = workdir / "host"
    host.mkdir(exist_ok=True)
    res: dict = {"records": n, "record_bytes": RECORD, "write_bytes": BATCH}
    try:
        mp = d.mp
        plain = mp / "plain"
        plain.mkdir()
        for name in ("a1", "a1s", "a4"):
            os.mkdir(mp / "queues" / name)
        os.mkdir(mp / "queues" / "a1" / "views" / "v0")
        for v in range(1, 4):
            os.mkdir(mp / "queues" / "a1" / "views" / f"v{v}")
        cases = {"append_1p_nofsync": ("a1", {}), "append_1p_fsync64M": ("a1s", {"fsync": True}),
                 "append_4p_nofsync": ("a4", {"producers": 4})}
        for key, (name, kw) in cases.items():
            res[key] = {"queue": append_to(mp / "queues" / name / "append", batches, **kw),
                        "mount_file": append_to(plain / f"{name}.jsonl", batches, **kw),
                        "host_file": append_to(host / f"{name}.jsonl", batches, **kw)}
        for views in (1, 4):
            res[f"consume_{views}v"] = {
                "queue": consume([mp / "queues" / "a1" / "views" / f"v{v}" / "records" for v in range(views)], n),
                "mount_file": consume([plain / "a1.jsonl"] * views, n),
                "host_file": consume([host / "a1.jsonl"] * views, n)}
        os.mkdir(mp / "queues" / "lat")
        res["latency"] = latency(mp / "queues" / "lat")
        if spark:
            os.mkdir(mp / "queues" / "slat")
            res["streaming_latency"] = streaming_latency(mp / "queues" / "slat")
        for name in ("a1", "a1s", "a4"):
            os.rmdir(mp / "queues" / name)
        res["volume_bytes"] = volume_bytes(mp, max(1, batches // 4))
        res["daemon_peak_rss_bytes"] = {"sampled": d.peak_rss, "vmhwm": d.hwm()}
    finally:
        d.stop()
    return res


def table(res: dict) -> str:
    rows = [f"{'workload':20s} {'queue rec/s':>12s} {'MB/s':>6s} {'mount file':>12s} {'MB/s':>6s} "
            f"{'host file':>12s} {'MB/s':>6s}"]
    for key, v in res.items():
        if isinstance(v, dict) and "queue" in v:
            cells = "".join(f" {v[s]['records_per_s']:12,d} {v[s]['mb_per_s']:6.1f}"
                            for s in ("queue", "mount_file", "host_file"))
            rows.append(f"{key:20s}{cells}")
    lat, vb, rss = res["latency"], res["volume_bytes"], res["daemon_peak_rss_bytes"]
    rows.append(f"append->visible latency: median {lat['median_ms']} ms, p99 {lat['p99_ms']} ms, max "
                f"{lat['max_ms']} ms ({lat['records']} records)")
    if "streaming_latency" in res:
        sl = res["streaming_latency"]
        rows.append(f"append->Structured Streaming batch latency (segments sealed every {sl['seal_seconds']} s, "
                    f"trigger {sl['trigger_ms']} ms): median {sl['median_ms']} ms, p99 {sl['p99_ms']} ms, max "
                    f"{sl['max_ms']} ms ({sl['records']} records)")
    rows.append(f"volume bytes: 1 view {vb['1_views_bytes']:,d}, 4 views {vb['4_views_bytes']:,d} "
                f"(x{vb['ratio_4_to_1']})")
    rows.append(f"daemon peak RSS: {rss['sampled'] / (1 << 20):.0f} MiB sampled, {rss['vmhwm'] / (1 << 20):.0f} MiB "
                "VmHWM")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_queue_mount", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, help="a folder on the host filesystem (default: a new temporary one)")
    ap.add_argument("--records", type=int, default=1_000_000, help="records per workload (default 1000000)")
    ap.add_argument("--json", type=Path, help="also write every number to this file")
    ap.add_argument("--spark", action="store_true", help="also measure append -> Structured Streaming latency "
                    "(starts a local Spark session)")
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench_queue_mount.", dir=args.workdir))
    try:
        res = run(workdir, args.records, spark=args.spark)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(table(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

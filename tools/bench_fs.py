"""Filesystem benchmark: traxfs beside its baselines, on the same machine, in one run.

``python -m traxfs.tools.bench_fs [--workdir DIR] [--size 512M] [--runtime 8] [--rows 200000]
[--only io|dirs] [--walk 10000] [--list 100000]``

Targets, each a directory:

* ``direct``      — a folder on the host filesystem that holds the image files (the backing
  store used directly);
* ``passthrough`` — the same kind of folder through ``traxfs.tools.passthrough``, a minimal
  pyfuse3 + trio pass-through filesystem (the cost of a Python FUSE server alone);
* ``traxfs``      — a traxfs filesystem on a sparse image file in that folder, mounted by
  ``trax mount``.

Workloads: fio 1 MiB sequential write (with a final fsync) and read (page caches dropped first),
4 KiB random write and read, eight writers of 4 KiB each calling fsync after every write; file
create / stat / unlink rates from Python; directories (``dirs``): a ``telldir``/``seekdir``
walk of ``--walk`` entries (``tools/dirwalk.py``: a seek back after every entry) and ``ls -f``
of ``--list`` entries (caches dropped first); and the PySpark job (``traxfs.tools.spark_job``) on
``direct`` and on ``traxfs`` with one warmed-up Spark session. The table prints each number
beside its baseline, and the peak resident memory of the two FUSE servers over their runs;
``--json`` writes everything (with the servers' CPU time, threads and descriptors at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..fs.process_status import process_status
from .dirwalk import seekdir_walk
from .mounts import find_mount, fuse_servers
from .sizes import parse_size

FIO_JOBS = {
    "seq_write_1M": ["--rw=write", "--bs=1M", "--end_fsync=1"],
    "seq_read_1M": ["--rw=read", "--bs=1M"],
    "rand_write_4K": ["--rw=randwrite", "--bs=4k", "--time_based"],
    "rand_read_4K": ["--rw=randread", "--bs=4k", "--time_based"],
    "fsync_8x4K": ["--rw=write", "--bs=4k", "--fsync=1", "--numjobs=8", "--time_based", "--group_reporting"],
}


def _drop_caches() -> None:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass  # not root: reads may come from the page cache (said in the output)


def _fio(directory: Path, name: str, size: int, runtime: int) -> dict:
    args = ["fio", "--output-format=json", f"--name={name}", f"--directory={directory}", "--ioengine=psync",
            f"--size={size if name != 'fsync_8x4K' else 16 << 20}", f"--runtime={runtime}",
            "--filename_format=$jobname.$jobnum", *FIO_JOBS[name]]
    if name.startswith(("seq_read", "rand_read")):
        _drop_caches()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"fio {name} on {directory}: {proc.stderr.strip() or proc.stdout[-400:]}")
    job = json.loads(proc.stdout[proc.stdout.index("{"):])["jobs"][0]
    side = job["write"] if "write" in name or "fsync" in name else job["read"]
    return {"MBps": round(side["bw_bytes"] / 1e6, 1), "iops": round(side["iops"])}


def _meta_rates(directory: Path, n: int = 2000) -> dict:
    d = directory / "meta"
    d.mkdir()
    names = [d / f"f{i:05d}" for i in range(n)]
    out = {}
    t = time.perf_counter()
    for p in names:
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    out["create_per_s"] = round(n / (time.perf_counter() - t))
    _drop_caches()
    t = time.perf_counter()
    for p in names:
        os.stat(p)
    out["stat_per_s"] = round(n / (time.perf_counter() - t))
    t = time.perf_counter()
    for p in names:
        os.unlink(p)
    out["unlink_per_s"] = round(n / (time.perf_counter() - t))
    d.rmdir()
    return out


def _dir_rates(directory: Path, walk: int, listing: int) -> dict:
    """Seconds for a seekdir walk of ``walk`` entries and for ``ls -f`` of ``listing`` entries."""
    out = {}
    for key, n in (("seekdir_walk", walk), ("ls_f", listing)):
        d = directory / key
        d.mkdir()
        for i in range(n):
            os.close(os.open(d / f"entry-{i:07d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        _drop_caches()
        t = time.perf_counter()
        if key == "ls_f":
            names = subprocess.run(["ls", "-f", str(d)], capture_output=True, check=True).stdout.splitlines()
        else:
            names = seekdir_walk(d)
        out[key + "_s"] = round(time.perf_counter() - t, 2)
        got = len(set(names) - {b".", b".."})  # the pass-through lists no . and ..
        if got != n:
            raise RuntimeError(f"{key} of {d}: {got} names, expected {n}")
        shutil.rmtree(d)
    out.update(walk_entries=walk, ls_entries=listing)
    return out


def _clear(directory: Path) -> None:
    for p in directory.iterdir():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def _measure(directory: Path, size: int, runtime: int, only: str | None, dirs: tuple[int, int]) -> dict:
    res = {}
    if only in (None, "io"):
        for name in FIO_JOBS:
            res[name] = _fio(directory, name, size, runtime)
            if name in ("seq_read_1M", "rand_read_4K", "fsync_8x4K"):
                _clear(directory)
        res["metadata"] = _meta_rates(directory)
    if only in (None, "dirs"):
        res["dirs"] = _dir_rates(directory, *dirs)
    return res


class _Mounted:
    """A FUSE server process for a ``with`` block; unmounted and stopped on the way out. Just
    before the unmount, ``server`` takes the server's figures (:func:`process_status`: its peak
    resident memory is the high-water mark over the whole run)."""

    def __init__(self, argv: list[str], mp: Path):
        self.argv, self.mp = argv, mp
        self.proc: subprocess.Popen | None = None
        self.server: dict = {}

    def __enter__(self) -> _Mounted:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not os.path.ismount(self.mp):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mount failed: {self.proc.stderr.read().decode()[-500:] if self.proc.stderr else ''}")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        entry = find_mount(str(self.mp))
        for pid in sorted(fuse_servers(entry) if entry else set()) or [self.proc.pid]:
            try:
                self.server = process_status(pid)
                break
            except ProcessLookupError:
                continue
        subprocess.run(["fusermount3", "-u", str(self.mp)], capture_output=True)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run(workdir: Path, size: int, runtime: int, rows: int, spark: bool = True, only: str | None = None,
        dirs: tuple[int, int] = (10_000, 100_000)) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    top = Path(tempfile.mkdtemp(prefix="bench-fs-", dir=workdir))
    report: dict = {"size": size, "runtime_s": runtime, "rows": rows, "cpus": os.cpu_count(), "targets": {}}
    try:
        direct = top / "direct"
        direct.mkdir()
        report["targets"]["direct"] = _measure(direct, size, runtime, only, dirs)
        src, pmnt = top / "pt-src", top / "pt-mnt"
        src.mkdir()
        pmnt.mkdir()
        with _Mounted([sys.executable, "-m", "traxfs.tools.passthrough", str(src), str(pmnt), "--foreground"],
                      pmnt) as mounted:
            report["targets"]["passthrough"] = _measure(pmnt, size, runtime, only, dirs)
        report["servers"] = {"passthrough": mounted.server}
        image, tmnt, home = top / "fs.img", top / "tx-mnt", top / "home"
        tmnt.mkdir()
        cli = [sys.executable, "-m", "traxfs.tools.cli", "--home", str(home)]
        subprocess.run([*cli, "mkfs", str(image), "--size", str(max(4 << 30, size * 6))], check=True,
                       capture_output=True)
        with _Mounted([*cli, "mount", "--foreground", str(image), str(tmnt)], tmnt) as mounted:
            work = tmnt / "bench"
            work.mkdir()
            report["targets"]["traxfs"] = _measure(work, size, runtime, only, dirs)
            if spark and only is None:
                report["spark"] = _spark(direct, work, rows)
        report["servers"]["traxfs"] = mounted.server
    finally:
        shutil.rmtree(top, ignore_errors=True)
    return report


def _spark(direct: Path, traxfs: Path, rows: int) -> dict:
    from . import spark_job

    session = spark_job.session()
    try:
        spark_job.run(direct / "warmup", rows=rows // 10, spark=session)  # JIT and class loading
        out = {}
        for name, d in (("direct", direct), ("traxfs", traxfs)):
            t = time.perf_counter()
            spark_job.run(d / "spark", rows=rows, spark=session)
            out[name + "_s"] = round(time.perf_counter() - t, 2)
        out["ratio"] = round(out["traxfs_s"] / out["direct_s"], 2)
        return out
    finally:
        spark_job.stop(session)


def table(report: dict) -> str:
    t = report["targets"]
    lines = [f"{'workload':<16}{'direct':>12}{'passthrough':>14}{'traxfs':>12}{'tx/pt':>8}{'tx/direct':>11}"]
    for name in FIO_JOBS if "metadata" in t["direct"] else ():
        unit = "MBps" if "1M" in name else "iops"
        vals = [t[k][name][unit] for k in ("direct", "passthrough", "traxfs")]
        lines.append(f"{name + ' ' + unit:<16}{vals[0]:>12}{vals[1]:>14}{vals[2]:>12}"
                     f"{vals[2] / vals[1]:>8.2f}{vals[2] / vals[0]:>11.2f}")
    for key in ("create_per_s", "stat_per_s", "unlink_per_s") if "metadata" in t["direct"] else ():
        vals = [t[k]["metadata"][key] for k in ("direct", "passthrough", "traxfs")]
        lines.append(f"{key:<16}{vals[0]:>12}{vals[1]:>14}{vals[2]:>12}"
                     f"{vals[2] / vals[1]:>8.2f}{vals[2] / vals[0]:>11.2f}")
    if "dirs" in t["direct"]:
        dirs = t["direct"]["dirs"]
        for key, label in (("seekdir_walk_s", f"seekdir walk {dirs['walk_entries']} s"),
                           ("ls_f_s", f"ls -f {dirs['ls_entries']} s")):
            vals = [t[k]["dirs"][key] for k in ("direct", "passthrough", "traxfs")]
            lines.append(f"{label:<16}{vals[0]:>12}{vals[1]:>14}{vals[2]:>12}"
                         f"{vals[2] / max(vals[1], 0.01):>8.2f}{vals[2] / max(vals[0], 0.01):>11.2f}")
    servers = report.get("servers", {})
    if servers:
        lines.append("FUSE server peak RSS: " + ", ".join(
            f"{k} {v['peak_rss_bytes'] / (1 << 20):.0f} MiB" if v else f"{k} unknown (the server was gone)"
            for k, v in servers.items()))
    if "spark" in report:
        s = report["spark"]
        lines.append(f"spark job {report['rows']} rows: direct {s['direct_s']} s, traxfs {s['traxfs_s']} s "
                     f"(ratio {s['ratio']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m traxfs.tools.bench_fs", description=__doc__.split("\n")[0])
    p.add_argument("--workdir", default="/var/tmp/traxfs-bench", help="where the baselines and image live")
    p.add_argument("--size", type=parse_size, default=512 << 20, help="fio file size (default 512M)")
    p.add_argument("--runtime", type=int, default=8, help="seconds per time-based fio job (default 8)")
    p.add_argument("--rows", type=int, default=200_000, help="Spark job rows (default 200000)")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark job")
    p.add_argument("--only", choices=("io", "dirs"), help="only the fio and metadata workloads, or only the "
                   "directory ones (no Spark either way)")
    p.add_argument("--walk", type=int, default=10_000, help="entries of the seekdir walk (default 10000)")
    p.add_argument("--list", type=int, default=100_000, help="entries listed by ls -f (default 100000)")
    p.add_argument("--json", help="also write the report here")
    a = p.parse_args(argv)
    report = run(Path(a.workdir), a.size, a.runtime, a.rows, spark=not a.no_spark, only=a.only,
                 dirs=(a.walk, a.list))
    print(table(report))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

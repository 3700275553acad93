"""Filesystem benchmark: traxfs beside its baselines, on the same machine, in one run.

``python -m traxfs.tools.bench_fs [--workdir DIR] [--size 1G] [--runtime 8] [--rounds 3]
[--jobs JOB,...] [--files 2000] [--before DIR] [--rows 200000] [--only io|dirs] [--walk 10000]
[--list 100000]``

Targets, each a directory, all mounted at once:

* ``direct``      — a folder on the host filesystem that holds the image files (the backing
  store used directly);
* ``passthrough`` — the same kind of folder through ``traxfs.tools.passthrough``, a minimal
  pyfuse3 + trio pass-through filesystem (the cost of a Python FUSE server alone);
* ``traxfs``      — a traxfs filesystem on a sparse image file in that folder, mounted by
  ``trax mount``;
* ``before``      — with ``--before DIR``: the same, served by the traxfs package in
  ``DIR/traxfs`` (a copy of the code before a change), so a change is measured before and after
  in one run.

Jobs (issue 17's; fio ``ioengine=psync``, ``direct=0``, ``fallocate=none``): 1 MiB sequential
write of ``--size`` then fsync (MB/s); 1 MiB sequential read of it after the page caches are
dropped (MB/s); 4 KiB random read of it, cold, and 4 KiB random write with an fsync every 32
writes (IOPS, ``--runtime`` seconds each); eight writers of 4 KiB random writes to 16 MiB files,
fsync after each (IOPS); 4 KiB random ``O_DIRECT`` writes through libaio, 16 in flight
(IOPS: the price of dropping each one's range from the page cache); and from Python, ``--files``
files: create with 1 KiB written, stat warm (a second pass), open-read-close warm (a second
pass), unlink (per second). ``--rounds`` rounds run interleaved (each job on every target back to
back, the order rotated per round) and the medians are shown with each ratio to ``direct``; the
load average before and after is printed, since the machine is shared.
Directories (``--only dirs``): a ``telldir``/``seekdir`` walk of ``--walk`` entries
(``tools/dirwalk.py``: a seek back after every entry) and ``ls -f`` of ``--list`` entries (caches
dropped first). A full run (neither ``--only`` nor ``--jobs``) also runs the PySpark job
(``traxfs.tools.spark_job``) on ``direct`` and on ``traxfs`` with one warmed-up Spark session.
The peak resident memory of the FUSE servers is printed; ``--json`` writes everything (with the
servers' CPU time, threads and descriptors).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..fs.process_status import process_status
from .before import checkout_problem, child_env
from .dirwalk import seekdir_walk
from .mounts import find_mount, fuse_servers
from .sizes import parse_size

FIO_COMMON = ["--ioengine=psync", "--direct=0", "--fallocate=none"]
FIO_JOBS = {  # issue 17's jobs: name -> (fio arguments, unit reported)
    "seq_write_1M": (["--rw=write", "--bs=1M", "--end_fsync=1", "--filename=data"], "MBps"),
    "seq_read_1M": (["--rw=read", "--bs=1M", "--filename=data"], "MBps"),
    "rand_read_4K": (["--rw=randread", "--bs=4k", "--time_based", "--filename=data"], "iops"),
    "rand_write_4K_fsync32": (["--rw=randwrite", "--bs=4k", "--fsync=32", "--time_based", "--filename=data"],
                              "iops"),
    "fsync_8x4K": (["--rw=randwrite", "--bs=4k", "--fsync=1", "--numjobs=8", "--time_based",
                    "--group_reporting", "--size=16M", "--filename_format=$jobname.$jobnum"], "iops"),
    # O_DIRECT writes submitted asynchronously (the later --ioengine/--direct win): each is followed
    # by a drop of its range from the kernel's page cache (fuse_lowlevel), which this prices
    "direct_write_4K_aio16": (["--rw=randwrite", "--bs=4k", "--ioengine=libaio", "--direct=1", "--iodepth=16",
                               "--time_based", "--filename=data"], "iops"),
}
META_JOBS = {"create_1K": "create_per_s", "stat_warm": "stat_per_s", "read_1K": "read_per_s", "unlink": "unlink_per_s"}
COLD = ("seq_read_1M", "rand_read_4K")  # page caches dropped first
JOBS = (*FIO_JOBS, *META_JOBS)


def _drop_caches() -> None:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass  # not root: reads may come from the page cache (said in the output)


def _fio(directory: Path, name: str, size: int, runtime: int) -> dict:
    args, _ = FIO_JOBS[name]
    cmd = ["fio", "--output-format=json", f"--name={name}", f"--directory={directory}", *FIO_COMMON,
           f"--size={size}", f"--runtime={runtime}", *args]  # a later --size (fsync_8x4K's) wins
    if name in COLD:
        _drop_caches()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"fio {name} on {directory}: {proc.stderr.strip() or proc.stdout[-400:]}")
    job = json.loads(proc.stdout[proc.stdout.index("{"):])["jobs"][0]
    side = job["read"] if "read" in name else job["write"]
    return {"MBps": round(side["bw_bytes"] / 1e6, 1), "iops": round(side["iops"])}


def _read_small(path: Path) -> None:
    """open read-only, read (a 1 KiB file whole), close."""
    fd = os.open(path, os.O_RDONLY)
    os.read(fd, 4096)
    os.close(fd)


WARM_JOBS = {"stat_warm": os.stat, "read_1K": _read_small}  # the jobs whose second pass is timed


class _MetaFiles:
    """The Python create / stat / read / unlink loop over ``n`` files of 1 KiB in
    ``directory/meta``: ``create_1K`` (open, write 1 KiB, close), ``stat_warm`` (one untimed pass
    first, so every name and attribute is in the kernel's caches as a new user's second ``ls -l``
    finds it), ``read_1K`` (open read-only, read, close; warm the same way: what a second
    ``grep -r`` or a job re-reading its inputs does) and ``unlink`` — each a rate per second,
    run in that order."""

    def __init__(self, directory: Path, n: int):
        self.dir = directory / "meta"
        self.names = [self.dir / f"f{i:05d}" for i in range(n)]

    def run(self, job: str) -> float:
        if job == "create_1K":
            self.dir.mkdir()
        payload = b"x" * 1024
        t = time.perf_counter()
        if job == "create_1K":
            for p in self.names:
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, payload)
                os.close(fd)
        elif job in WARM_JOBS:
            each = WARM_JOBS[job]
            for _ in range(2):  # an untimed pass first: names (and pages) in the kernel's caches
                t = time.perf_counter()
                for p in self.names:
                    each(p)
        else:
            for p in self.names:
                os.unlink(p)
        rate = len(self.names) / (time.perf_counter() - t)
        if job == "unlink":
            self.dir.rmdir()
        return round(rate)


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


class _Mounted:
    """A FUSE server process for a ``with`` block; unmounted and stopped on the way out. Just
    before the unmount, ``server`` takes the server's figures (:func:`process_status`: its peak
    resident memory is the high-water mark over the whole run)."""

    def __init__(self, argv: list[str], mp: Path, env: dict | None = None):
        self.argv, self.mp, self.env = argv, mp, env
        self.proc: subprocess.Popen | None = None
        self.server: dict = {}

    def __enter__(self) -> _Mounted:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=self.env)
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
        for _ in range(20):  # busy for a moment after a job (a closing fio, the kernel's release)
            if subprocess.run(["fusermount3", "-u", str(self.mp)], capture_output=True).returncode == 0:
                break
            time.sleep(0.5)
        else:  # never leave a mount behind: detach it lazily, the server then ends
            subprocess.run(["fusermount3", "-uz", str(self.mp)], capture_output=True)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _medians(runs: dict) -> dict:
    return {job: {"runs": r, "median": statistics.median(r)} for job, r in runs.items()}


def _rounds(targets: dict[str, Path], jobs: tuple[str, ...], size: int, runtime: int, rounds: int,
            meta_files: int) -> dict:
    """Every job on every target, ``rounds`` times, interleaved: round r runs each job on all
    targets back to back (their order rotated per round), so a load that comes and goes on the
    shared machine hits all targets alike. Returns target -> job -> runs and median."""
    runs: dict[str, dict[str, list]] = {t: {j: [] for j in jobs} for t in targets}
    names = list(targets)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for job in (j for j in FIO_JOBS if j in jobs):
            for t in order:
                runs[t][job].append(_fio(targets[t], job, size, runtime)[FIO_JOBS[job][1]])
        if set(jobs) & set(META_JOBS):
            meta = {t: _MetaFiles(targets[t], meta_files) for t in order}
            for job in META_JOBS:  # create and unlink always run (untimed unless asked): the others need files
                if job in jobs or job in ("create_1K", "unlink"):
                    for t in order:
                        rate = meta[t].run(job)
                        if job in jobs:
                            runs[t][job].append(rate)
        for t in order:
            _clear(targets[t])
    return {t: _medians(r) for t, r in runs.items()}


def run(workdir: Path, size: int, runtime: int, rows: int, spark: bool = True, only: str | None = None,
        dirs: tuple[int, int] = (10_000, 100_000), jobs: tuple[str, ...] = JOBS, rounds: int = 3,
        before: Path | None = None, meta_files: int = 2000) -> dict:
    """Mount the pass-through, traxfs (and, with ``before``, the traxfs package found in
    ``before/traxfs``: another checkout, e.g. the code before a change) side by side beside a
    plain folder of the host, and measure them in the same run."""
    made = not workdir.exists()  # removed again at the end if this run made it
    workdir.mkdir(parents=True, exist_ok=True)
    top = Path(tempfile.mkdtemp(prefix="bench-fs-", dir=workdir))
    report: dict = {"size": size, "runtime_s": runtime, "rows": rows, "rounds": rounds, "cpus": os.cpu_count(),
                    "load_before": os.getloadavg(), "targets": {}, "servers": {}}
    try:
        with contextlib.ExitStack() as stack:
            direct = top / "direct"
            direct.mkdir()
            targets = {"direct": direct}
            src, pmnt = top / "pt-src", top / "pt-mnt"
            src.mkdir()
            pmnt.mkdir()
            servers = {"passthrough": stack.enter_context(_Mounted(
                [sys.executable, "-m", "traxfs.tools.passthrough", str(src), str(pmnt), "--foreground"], pmnt))}
            targets["passthrough"] = pmnt
            for name, pythonpath in (("traxfs", None), ("before", before)):
                if name == "before" and before is None:
                    continue
                image, tmnt, home = top / f"{name}.img", top / f"{name}-mnt", top / f"{name}-home"
                tmnt.mkdir()
                env = child_env(pythonpath)
                cli = [sys.executable, "-m", "traxfs.tools.cli", "--home", str(home)]
                subprocess.run([*cli, "mkfs", str(image), "--size", str(max(4 << 30, size * 6))], check=True,
                               capture_output=True, env=env)
                servers[name] = stack.enter_context(_Mounted([*cli, "mount", "--foreground", str(image), str(tmnt)],
                                                             tmnt, env))
                targets[name] = tmnt / "bench"
                targets[name].mkdir()
            if only in (None, "io"):
                report["targets"] = _rounds(targets, jobs, size, runtime, rounds, meta_files)
            if only == "dirs" or (only is None and jobs == JOBS):  # a --jobs subset is the quick run
                for t, d in targets.items():
                    report["targets"].setdefault(t, {})["dirs"] = _dir_rates(d, *dirs)
            if spark and only is None and jobs == JOBS:
                report["spark"] = _spark(direct, targets["traxfs"], rows)
        report["servers"] = {k: m.server for k, m in servers.items()}
        report["load_after"] = os.getloadavg()
    finally:
        shutil.rmtree(top, ignore_errors=True)
        if made and not any(workdir.iterdir()):
            workdir.rmdir()
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
    names = list(t)
    extra = [n for n in names if n not in ("direct", "passthrough")]
    head = f"{'workload':<28}" + "".join(f"{n:>13}" for n in names) + f"{'tx/pt':>8}" + "".join(
        f"{n + '/direct':>15}" for n in extra)
    lines = [head]
    for job in JOBS:
        if job not in t["direct"]:
            continue
        unit = FIO_JOBS[job][1] if job in FIO_JOBS else "per_s"
        vals = {n: t[n][job]["median"] for n in names}
        lines.append(f"{job + ' ' + unit:<28}" + "".join(f"{vals[n]:>13,.1f}" for n in names)
                     + f"{vals['traxfs'] / vals['passthrough']:>8.2f}"
                     + "".join(f"{vals[n] / vals['direct']:>15.3f}" for n in extra))
    if "dirs" in t["direct"]:
        dirs = t["direct"]["dirs"]
        for key, label in (("seekdir_walk_s", f"seekdir walk {dirs['walk_entries']} s"),
                           ("ls_f_s", f"ls -f {dirs['ls_entries']} s")):
            vals = {n: t[n]["dirs"][key] for n in names}
            lines.append(f"{label:<28}" + "".join(f"{vals[n]:>13,.2f}" for n in names)
                         + f"{vals['traxfs'] / max(vals['passthrough'], 0.01):>8.2f}"
                         + "".join(f"{vals[n] / max(vals['direct'], 0.01):>15.2f}" for n in extra))
    servers = report.get("servers", {})
    if servers:
        lines.append("FUSE server peak RSS: " + ", ".join(
            f"{k} {v['peak_rss_bytes'] / (1 << 20):.0f} MiB" if v else f"{k} unknown (the server was gone)"
            for k, v in servers.items()))
    lines.append("load average (1, 5, 15 min) before: {:.2f} {:.2f} {:.2f}".format(*report["load_before"])
                 + ", after: {:.2f} {:.2f} {:.2f}".format(*report["load_after"])
                 + f"; {report['rounds']} rounds interleaved, medians")
    if "spark" in report:
        s = report["spark"]
        lines.append(f"spark job {report['rows']} rows: direct {s['direct_s']} s, traxfs {s['traxfs_s']} s "
                     f"(ratio {s['ratio']})")
    return "\n".join(lines)


def _job_list(text: str) -> tuple[str, ...]:
    jobs = tuple(j for j in text.split(",") if j)
    unknown = [j for j in jobs if j not in JOBS]
    if unknown or not jobs:
        raise argparse.ArgumentTypeError(f"unknown jobs {unknown}: choose from {','.join(JOBS)}")
    return tuple(j for j in JOBS if j in jobs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m traxfs.tools.bench_fs", description=__doc__.split("\n")[0])
    p.add_argument("--workdir", default="/var/tmp/traxfs-bench", help="where the baselines and image live")
    p.add_argument("--size", type=parse_size, default=1 << 30, help="fio file size of the sequential and random jobs (default 1G)")
    p.add_argument("--runtime", type=int, default=8, help="seconds per time-based fio job (default 8)")
    p.add_argument("--rows", type=int, default=200_000, help="Spark job rows (default 200000)")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark job")
    p.add_argument("--only", choices=("io", "dirs"), help="only the fio and metadata workloads, or only the "
                   "directory ones (no Spark either way)")
    p.add_argument("--walk", type=int, default=10_000, help="entries of the seekdir walk (default 10000)")
    p.add_argument("--list", type=int, default=100_000, help="entries listed by ls -f (default 100000)")
    p.add_argument("--jobs", type=_job_list, default=JOBS,
                   help=f"comma-separated subset of the jobs to run (default all: {','.join(JOBS)})")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are shown (default 3)")
    p.add_argument("--files", type=int, default=2000, help="files of the create/stat/read/unlink jobs (default 2000)")
    p.add_argument("--before", type=Path, help="also mount the traxfs package in BEFORE/traxfs (another "
                   "checkout: the code before a change) as target 'before', in the same run")
    p.add_argument("--json", help="also write the report here")
    a = p.parse_args(argv)
    if a.before is not None and (problem := checkout_problem(a.before, "tools/cli.py")):
        p.error(problem)
    if a.rounds < 1 or a.files < 1:
        p.error("--rounds and --files must be at least 1")
    report = run(Path(a.workdir), a.size, a.runtime, a.rows, spark=not a.no_spark, only=a.only,
                 dirs=(a.walk, a.list), jobs=a.jobs, rounds=a.rounds, before=a.before, meta_files=a.files)
    print(table(report))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

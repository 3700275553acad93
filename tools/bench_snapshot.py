"""Snapshot benchmark: creation time against the amount of data, writes with and without a live
snapshot, delete time and the space it returns — through a real mount (``trax mount`` of a
sparse image file).

``python -m traxfs.tools.bench_snapshot [--workdir DIR] [--levels 100M,1G,8G] [--fio-size 256M]
[--runtime 8] [--json]``

1. **Create**: the filesystem is filled (files of 64 MiB, 1 MiB writes) up to each level in
   turn; at each, three snapshots are taken (``mkdir MOUNT/.snapshots/NAME``, timed: the
   request until it returns, durable). Target: flat in the data, <= 50 ms.
2. **Writes**: fio 4 KiB random writes and 1 MiB sequential writes on a file of ``--fio-size``
   without a snapshot, then with one live after its first copy was paid (a sequential overwrite
   of the whole file, also reported: each page is copied once). Target: >= 0.8x.
3. **Delete**: a snapshot that alone holds ``--fio-size`` of old pages is deleted (timed), with
   the free space (statvfs) before and after.
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

from .bench_fs import _Mounted
from .sizes import parse_size

MiB = 1 << 20
FILE = 64 * MiB


def _fio(directory: Path, name: str, rw: str, bs: str, size: int, runtime: int | None) -> dict:
    args = ["fio", "--output-format=json", f"--name={name}", f"--directory={directory}", "--ioengine=psync",
            f"--size={size}", f"--rw={rw}", f"--bs={bs}", "--filename=bench.dat", "--end_fsync=1"]
    if runtime:
        args += [f"--runtime={runtime}", "--time_based"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"fio {name}: {proc.stderr.strip() or proc.stdout[-400:]}")
    side = json.loads(proc.stdout[proc.stdout.index("{"):])["jobs"][0]["write"]
    return {"MBps": round(side["bw_bytes"] / 1e6, 1), "iops": round(side["iops"])}


def _fill(directory: Path, upto: int, have: int) -> int:
    """Write files of :data:`FILE` bytes until ``upto`` bytes are there; returns the bytes."""
    block = os.urandom(MiB)
    while have < upto:
        n = min(FILE, upto - have)
        with open(directory / f"data{have // FILE:05d}", "wb") as f:
            for _ in range(n // MiB):
                f.write(block)
        have += n
    os.sync()
    return have


def _create(mp: Path, name: str) -> float:
    t0 = time.perf_counter()
    os.mkdir(mp / ".snapshots" / name)
    return time.perf_counter() - t0


def _free(mp: Path) -> int:
    st = os.statvfs(mp)
    return st.f_bfree * st.f_frsize


def run(workdir: Path, levels: list[int], fio_size: int, runtime: int) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    top = Path(tempfile.mkdtemp(prefix="bench-snap-", dir=workdir))
    report: dict = {"levels": levels, "fio_size": fio_size, "runtime_s": runtime, "cpus": os.cpu_count()}
    try:
        image, mp, home = top / "fs.img", top / "mnt", top / "home"
        mp.mkdir()
        cli = [sys.executable, "-m", "traxfs.tools.cli", "--home", str(home)]
        subprocess.run([*cli, "mkfs", str(image), "--size", str(max(levels) + 4 * fio_size + (2 << 30))],
                       check=True, capture_output=True)
        with _Mounted([*cli, "mount", "--foreground", str(image), str(mp)], mp):
            data = mp / "data"
            data.mkdir()
            have, creates = 0, []
            for level in levels:
                have = _fill(data, level, have)
                ms = [round(_create(mp, f"at{level >> 20}M-{k}") * 1000, 2) for k in range(3)]
                creates.append({"data_bytes": have, "create_ms": ms})
            report["create"] = creates
            for name in os.listdir(mp / ".snapshots"):  # (none holds anything alone: fast)
                os.rmdir(mp / ".snapshots" / name)
            shutil.rmtree(data)
            os.sync()
            work = mp / "fio"
            work.mkdir()
            _fio(work, "layout", "write", "1M", fio_size, None)
            without = {"rand_write_4K": _fio(work, "rand", "randwrite", "4k", fio_size, runtime),
                       "seq_write_1M": _fio(work, "seq", "write", "1M", fio_size, None)}
            t_snap = _create(mp, "live")
            first = _fio(work, "first-copy", "write", "1M", fio_size, None)
            with_snap = {"rand_write_4K": _fio(work, "rand", "randwrite", "4k", fio_size, runtime),
                         "seq_write_1M": _fio(work, "seq", "write", "1M", fio_size, None)}
            report["writes"] = {"without": without, "with_snapshot": with_snap, "first_copy_seq_1M": first,
                                "create_ms": round(t_snap * 1000, 2),
                                "ratio": {k: round(with_snap[k]["MBps"] / without[k]["MBps"], 2) for k in without}}
            os.sync()
            time.sleep(2)  # frees count once durable
            before = _free(mp)
            info = json.loads(os.getxattr(mp / ".snapshots" / "live", "trax.snapshot"))
            t0 = time.perf_counter()
            os.rmdir(mp / ".snapshots" / "live")
            took = time.perf_counter() - t0
            os.sync()
            time.sleep(2)
            report["delete"] = {"unique_bytes": info["unique_bytes"], "delete_ms": round(took * 1000, 1),
                                "free_before": before, "free_after": _free(mp),
                                "returned_bytes": _free(mp) - before}
    finally:
        shutil.rmtree(top, ignore_errors=True)
    return report


def table(r: dict) -> str:
    lines = ["create (3 snapshots at each amount of data):"]
    for c in r["create"]:
        lines.append(f"  {c['data_bytes'] / 2**30:7.2f} GiB   " + "  ".join(f"{ms:7.2f} ms" for ms in c["create_ms"]))
    w = r["writes"]
    lines.append(f"writes on a {r['fio_size'] >> 20} MiB file (snapshot taken in {w['create_ms']} ms; first copy, "
                 f"seq 1M: {w['first_copy_seq_1M']['MBps']} MB/s):")
    for k in w["without"]:
        lines.append(f"  {k:14s} without {w['without'][k]['MBps']:8.1f} MB/s {w['without'][k]['iops']:7d} IOPS   "
                     f"with {w['with_snapshot'][k]['MBps']:8.1f} MB/s {w['with_snapshot'][k]['iops']:7d} IOPS   "
                     f"ratio {w['ratio'][k]}")
    d = r["delete"]
    lines.append(f"delete: {d['delete_ms']} ms; unique {d['unique_bytes'] >> 20} MiB; free "
                 f"{d['free_before'] >> 20} MiB -> {d['free_after'] >> 20} MiB (+{d['returned_bytes'] >> 20} MiB)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m traxfs.tools.bench_snapshot", description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=Path("/tmp"), help="folder for the image file (default /tmp)")
    p.add_argument("--levels", default="100M,1G,8G", help="amounts of data to take snapshots at (default "
                   "100M,1G,8G)")
    p.add_argument("--fio-size", type=parse_size, default=256 * MiB, help="fio file size (default 256M)")
    p.add_argument("--runtime", type=int, default=8, help="seconds per random-write run (default 8)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    a = p.parse_args(argv)
    report = run(a.workdir, [parse_size(x) for x in a.levels.split(",")], a.fio_size, a.runtime)
    print(json.dumps(report, indent=2) if a.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

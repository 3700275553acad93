"""The filesystem's write path in process, now and before a change, alternated in one run.

Through the mount a write's time is the sum of the writer's kernel side, the daemon's kernel side
and the daemon's Python, one after the other; this measures the last alone, without FUSE, on a
fresh image file for every run:

* ``seq`` — 256 writes of 1 MiB into a new file (the second to fourth of four files): CPU
  (user) per MiB, the Python's share of a sequential write;
* ``rand`` — 4 KiB overwrites at random pages of a 256 MiB file with an fsync every 32 (4,096
  per round, three rounds after a warm-up one): µs per write, and writes per second with the
  fsyncs.

With ``--before DIR`` each run is made for the traxfs package in ``DIR/traxfs`` too (an older
checkout, built), the two alternated; medians of all runs are printed.
``python -m traxfs.tools.bench_write_path [--runs 3] [--before DIR] [--workdir /var/tmp]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from .before import checkout_problem, child_env

_CHILD = r"""
import json, os, random, resource, sys, time
from traxfs.fs.filesystem import FileSystem
from traxfs.volume.device import ImageFileDevice
MiB = 1 << 20
kind, path = sys.argv[1], sys.argv[2]
dev = ImageFileDevice(path, 2048 * MiB, create=True)
FileSystem.mkfs(dev)
fs = FileSystem.open(dev)
out = []
if kind == "seq":
    data = bytes(MiB)
    for r in range(4):
        node = fs.create(1, b"f%d" % r, 0o100644, 0, 0)
        u0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime
        for i in range(256):
            fs.write(node.ino, i * MiB, data)
        if r:
            out.append((resource.getrusage(resource.RUSAGE_SELF).ru_utime - u0) / 256 * 1e6)
        fs.fsync(node.ino)
else:
    node = fs.create(1, b"f", 0o100644, 0, 0)
    for i in range(256):
        fs.write(node.ino, i * MiB, bytes(MiB))
    fs.fsync(node.ino)
    rng, page = random.Random(1), os.urandom(4096)
    for r in range(4):
        t = time.perf_counter()
        synced = 0.0
        for i in range(4096):
            fs.write(node.ino, rng.randrange(65536) * 4096, page)
            if i % 32 == 31:
                t0 = time.perf_counter()
                fs.fsync(node.ino)
                synced += time.perf_counter() - t0
        took = time.perf_counter() - t
        if r:
            out.append(((took - synced) / 4096 * 1e6, 4096 / took))
fs.close()
dev.close()
print(json.dumps(out))
"""


def run_once(kind: str, before: str | None, workdir: str) -> list:
    """One child process on a fresh image: the measures of ``kind`` for the code now, or for
    the package in ``before``/traxfs."""
    env = child_env(before)
    with tempfile.TemporaryDirectory(dir=workdir, prefix="traxfs-bench-write-") as d:
        r = subprocess.run([sys.executable, "-c", _CHILD, kind, os.path.join(d, "fs.img")], env=env,
                           capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"{kind} run ({before or 'now'}) failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each kind per package, alternated (default 3)")
    ap.add_argument("--before", help="also the traxfs package in BEFORE/traxfs (an older checkout, built)")
    ap.add_argument("--workdir", default="/var/tmp", help="where the image files go (default /var/tmp)")
    a = ap.parse_args(argv)
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    if a.before and (problem := checkout_problem(a.before, "fs/filedata.py")):
        ap.error(problem)
    if not os.path.isdir(a.workdir):
        ap.error(f"--workdir {a.workdir}: no such directory")
    targets = {"now": None, **({"before": a.before} if a.before else {})}
    seq: dict[str, list[float]] = {t: [] for t in targets}
    rand: dict[str, list[tuple[float, float]]] = {t: [] for t in targets}
    for _ in range(a.runs):
        for name, where in targets.items():
            seq[name] += run_once("seq", where, a.workdir)
            rand[name] += run_once("rand", where, a.workdir)
    print(f"{'measure':<48}" + "".join(f"{t:>12}" for t in targets))
    rows = [("1 MiB sequential write, CPU per MiB (us)", {t: statistics.median(v) for t, v in seq.items()}),
            ("4 KiB random overwrite, per write (us)", {t: statistics.median(w for w, _ in v) for t, v in rand.items()}),
            ("  the same with fsync/32, writes per s", {t: statistics.median(s for _, s in v) for t, v in rand.items()})]
    for label, vals in rows:
        print(f"{label:<48}" + "".join(f"{vals[t]:>12,.1f}" for t in targets))
    print(f"medians of {a.runs} run(s) of each kind per package ({3 * a.runs} measures each), alternated")
    return 0


if __name__ == "__main__":
    sys.exit(main())

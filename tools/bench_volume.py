"""fio through an exposed logical volume, side by side with fio on a plain image file.

    python -m traxfs.tools.bench_volume [--workdir DIR] [--size 1G] [--runtime 5] [--repeat 1]
                                        [--layouts striped,linear,traxtent] [--stripe-unit 64K]
                                        [--json] [--keep]

Builds a fresh volume group on sparse image files in a new folder under ``--workdir`` (two
devices, so ``striped`` and ``traxtent`` stripe over two), creates one logical volume per layout,
fills it, exposes it with :func:`traxfs.tools.expose.serve` (in a background thread of this
process) and runs the job files of ``tools/fio`` on it: 1 MiB sequential write and read,
4 KiB random write and read, each time-based. The same jobs then run on a plain image file of
the same size in the same folder (the baseline, "direct"), twice:

* with ``O_DIRECT`` (the required baseline: the disk itself), and
* buffered, which is the regime the volume's own image-file devices use (they write into the
  host page cache and only ``fdatasync`` on flush), so it shows what FUSE and Python cost on top.

The exposed file is always driven with ``--direct=1``. The targets take turns job file by job
file, ``--repeat`` rounds, and the table shows medians (MB = 10^6 bytes) with the exposed/direct
ratios and whether "exposed >= 70 % of direct for 1 MiB sequential" holds;
``--json`` prints the numbers as JSON instead. Exits non-zero if anything fails; always
unmounts and removes the folder (unless ``--keep``).
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
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ..volume.group import VolumeGroup
from ..volume.logical import OpenLogicalVolume
from ..volume.registry import Registry
from ..volume.scan import pv_create
from .expose import serve

MiB = 1024 * 1024
FIO_DIR = Path(__file__).resolve().parent / "fio"
WORKLOADS = [  # (label, job file, job name in it, direction)
    ("seq write 1M", "seq-rw-1m.fio", "seq-write-1m", "write"),
    ("seq read 1M", "seq-rw-1m.fio", "seq-read-1m", "read"),
    ("rand write 4k", "rand-rw-4k.fio", "rand-write-4k", "write"),
    ("rand read 4k", "rand-rw-4k.fio", "rand-read-4k", "read"),
]
TARGET_RATIO = 0.70
DEVICES = 2


class BenchError(Exception):
    pass


def parse_size(text: str) -> int:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        return int(float(num) * units[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None


def fio(target: str, size: int, runtime: int, direct: bool, job: str) -> dict:
    """Run one job file on ``target``; return fio's JSON document."""
    env = dict(os.environ, TARGET=target, SIZE=str(size), RUNTIME=str(runtime), DIRECT=str(int(direct)))
    res = subprocess.run(["fio", "--output-format=json", str(FIO_DIR / job)], capture_output=True,
                         text=True, env=env, timeout=20 * runtime + 120)
    if res.returncode != 0:
        raise BenchError(f"fio {job} on {target} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    try:
        return json.loads(res.stdout[res.stdout.index("{"):])
    except ValueError as e:
        raise BenchError(f"fio {job} on {target}: unreadable JSON output ({e})") from None


def measure(target: str, size: int, runtime: int, direct: bool, job: str) -> dict[str, dict[str, float]]:
    """The workloads of one job file on ``target``: {label: {"MB/s": ..., "IOPS": ...}}."""
    doc = fio(target, size, runtime, direct, job)
    out = {}
    for label, file, name, rw in WORKLOADS:
        if file != job:
            continue
        (stats,) = [j for j in doc["jobs"] if j["jobname"] == name]
        if stats["error"]:
            raise BenchError(f"fio {name} on {target}: error {stats['error']}")
        out[label] = {"MB/s": stats[rw]["bw_bytes"] / 1e6, "IOPS": stats[rw]["iops"]}
    return out


def fill(write, size: int) -> None:
    """Write non-zero data over the whole target, so reads never hit sparse holes."""
    block = os.urandom(MiB)
    for off in range(0, size, MiB):
        write(off, block[: min(MiB, size - off)])


@contextlib.contextmanager
def exposed(lv: OpenLogicalVolume, mountpoint: Path) -> Iterator[str]:
    """Serve ``lv`` in a background thread; always unmount and join it on the way out."""
    ready, errors = threading.Event(), []

    def run() -> None:
        try:
            serve(lv, str(mountpoint), ready=ready.set)
        except BaseException as e:  # noqa: BLE001 — reported by the main thread
            errors.append(e)
        finally:
            ready.set()

    thread = threading.Thread(target=run, name="expose", daemon=True)
    thread.start()
    try:
        if not ready.wait(30) or errors:
            raise BenchError(f"cannot expose {lv.name} at {mountpoint}: {errors[0] if errors else 'timeout'}")
        yield str(mountpoint / "volume")
    finally:
        for lazy in ([], ["-z"], ["-z"]):
            if not os.path.ismount(mountpoint):
                break
            subprocess.run(["fusermount3", "-u", *lazy, str(mountpoint)], capture_output=True)
            time.sleep(0.2)
        thread.join(60)
        if thread.is_alive():
            raise BenchError(f"the server of {mountpoint} did not stop")
    if errors:
        raise BenchError(f"serving {lv.name} failed: {errors[0]}")


def run(work: Path, size: int, runtime: int, layouts: list[str], stripe_unit: int, repeat: int) -> dict:
    """Every workload on every target, ``repeat`` times; returns {target: {label: [samples]}}.

    The targets take turns job file by job file (exposed, then the image file with and without
    O_DIRECT), so a ratio compares runs made within seconds of each other: on a shared machine
    throughput drifts by 20 % from one minute to the next."""
    registry = Registry(work / "home")
    per_device = size * len(layouts) + 64 * MiB  # sparse: room for any allocation order
    paths = [str(work / f"pv{i}.img") for i in range(DEVICES)]
    for p in paths:
        pv_create(registry, p, size=per_device)
    VolumeGroup.create(registry, "bench", paths)
    base = work / "direct.img"
    with open(base, "wb") as f:
        fill(lambda off, data: os.pwrite(f.fileno(), data, off), size)
        os.fsync(f.fileno())
    samples: dict[str, dict[str, list]] = {}

    def record(target: str, got: dict[str, dict[str, float]]) -> None:
        for label, value in got.items():
            samples.setdefault(target, {}).setdefault(label, []).append(value)

    jobs = list(dict.fromkeys(job for _, job, _, _ in WORKLOADS))
    with VolumeGroup.open(registry, "bench") as vg:
        for layout in layouts:  # all first, so a refused allocation fails before any fio run
            vg.create_lv(layout, size, layout, stripe_unit=stripe_unit if layout == "striped" else None)
        for layout in layouts:
            lv = vg.open_lv(layout)
            fill(lv.write, lv.size)
            lv.flush()
            mnt = work / f"mnt-{layout}"
            mnt.mkdir()
            with exposed(lv, mnt) as path:
                for _ in range(repeat):
                    for job in jobs:
                        record(f"exposed {layout}", measure(path, size, runtime, True, job))
                        record("direct O_DIRECT", measure(str(base), size, runtime, True, job))
                        record("direct buffered", measure(str(base), size, runtime, False, job))
    return samples


def medians(samples: dict) -> dict:
    return {t: {label: {k: statistics.median(s[k] for s in runs) for k in ("MB/s", "IOPS")}
                for label, runs in by.items()} for t, by in samples.items()}


def table(results: dict, layouts: list[str]) -> str:
    cols = [f"exposed {layout}" for layout in layouts] + ["direct O_DIRECT", "direct buffered"]
    head = f"| workload | {' | '.join(cols)} | " + " | ".join(
        f"{layout}/{b}" for layout in layouts for b in ("O_DIRECT", "buffered")) + " |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for label, *_ in WORKLOADS:
        cells = [f"{results[c][label]['MB/s']:.1f} MB/s, {results[c][label]['IOPS']:.0f} IOPS" for c in cols]
        ratios = [results[f"exposed {layout}"][label]["MB/s"] / results[f"direct {b}"][label]["MB/s"]
                  for layout in layouts for b in ("O_DIRECT", "buffered")]
        lines.append(f"| {label} | {' | '.join(cells)} | " + " | ".join(f"{r:.2f}" for r in ratios) + " |")
    return "\n".join(lines)


def verdict(results: dict, layout: str) -> tuple[bool, list[float]]:
    """Is the exposed ``layout`` at >= 70 % of the O_DIRECT baseline for 1 MiB sequential?"""
    ratios = [results[f"exposed {layout}"][w]["MB/s"] / results["direct O_DIRECT"][w]["MB/s"]
              for w in ("seq write 1M", "seq read 1M")]
    return all(r >= TARGET_RATIO for r in ratios), ratios


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m traxfs.tools.bench_volume", description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default=tempfile.gettempdir(), help="where the work folder is made")
    ap.add_argument("--size", type=parse_size, default=1 << 30, help="logical volume size (default 1G)")
    ap.add_argument("--runtime", type=int, default=5, help="seconds per workload (default 5)")
    ap.add_argument("--layouts", default="striped", help="comma-separated: striped,linear,traxtent")
    ap.add_argument("--stripe-unit", type=parse_size, default=64 * 1024, help="for striped (default 64K)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds; the table shows medians (default 1)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args(argv)
    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    if args.size % MiB or args.size < 64 * MiB:
        ap.error("--size must be a whole number of MiB, at least 64M")
    if not layouts or any(x not in ("striped", "linear", "traxtent") for x in layouts):
        ap.error("--layouts takes striped, linear and/or traxtent")
    for tool in ("fio", "fusermount3"):
        if shutil.which(tool) is None:
            print(f"bench_volume: {tool} is not installed", file=sys.stderr)
            return 2
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="traxfs-bench-", dir=args.workdir))
    load = [os.getloadavg()[0]]  # other work on the machine skews every number: say how much
    try:
        samples = run(work, args.size, args.runtime, layouts, args.stripe_unit, max(1, args.repeat))
    except Exception as e:  # noqa: BLE001 — any failure is a failed benchmark
        print(f"bench_volume: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    load.append(os.getloadavg()[0])
    results = medians(samples)
    verdicts = {layout: verdict(results, layout) for layout in layouts}
    if args.json:
        print(json.dumps({"size": args.size, "runtime": args.runtime, "cpus": os.cpu_count(),
                          "repeat": args.repeat, "loadavg": load, "medians": results, "samples": samples,
                          "target_met": {k: v[0] for k, v in verdicts.items()}}, indent=2))
        return 0
    print(f"fio, {args.runtime} s per workload, {args.size // MiB} MiB, {os.cpu_count()} CPUs, "
          f"median of {args.repeat} round(s); load average {load[0]:.1f} at start, {load[1]:.1f} at end; "
          "ratio = exposed MB/s / direct MB/s\n")
    print(table(results, layouts))
    for layout, (ok, ratios) in verdicts.items():
        print(f"\ntarget: exposed {layout} >= {TARGET_RATIO:.0%} of O_DIRECT for 1 MiB sequential "
              f"(write {ratios[0]:.2f}, read {ratios[1]:.2f}): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The main job (``trax demo``): the stack end to end on image files, with Spark on top.

1. four sparse image files under a work folder become a volume group, and a traxtent volume
   (track-aligned extents) is created on it;
2. ``trax mkfs`` puts a filesystem on the volume and ``trax mount`` mounts it (a real daemon);
3. fio writes a file through the mount with crc32c verification;
4. the PySpark job (``traxfs.tools.spark_job``) writes Parquet and CSV through the mount with
   Spark's default committer, reads them back and checks them, overwrites them, and survives a
   failed and retried task;
5. the filesystem's own status (``/.trax/engine.json``) is saved, ``trax umount`` unmounts and
   ``trax fsck`` must find the filesystem clean;
6. Atropos on simulated disks: four Maxtor Atlas 10K III models (data in image files, timing
   from the disk model) — ``trax pv extract`` must recover one disk's geometry exactly, a
   ``quadrangle`` volume is laid out on them, and the paper's random-fetch and layout-parameter
   experiments plus a row-major = column-major check through a real quadrangle volume run
   (``traxfs.tools.bench_atropos --quick``; the full reproduction is that command without it);
7. the report (``report.json``) says what ran, what was checked and how long each part took.

``--volumes`` also runs the volume-layer demo first: one volume of each layout exposed as a
file through FUSE and driven by fio (crc32c verify, 1 MiB sequential write and read).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..volume.errors import VolumeError
from ..volume.group import READ, VolumeGroup
from ..volume.registry import Registry
from ..volume.scan import pv_create
from .sizes import format_size

DISKS = 4
VOLUMES = [  # name, layout, options
    ("linear", "linear", {}),
    ("striped64k", "striped", {"stripe_unit": 64 * 1024}),
    ("traxtent", "traxtent", {}),
    ("mirror", "striped", {"mirror": True}),
]


def _fio(args: list[str]) -> dict:
    proc = subprocess.run(["fio", "--output-format=json", *args], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise VolumeError(f"fio failed ({' '.join(args[:3])} ...): {proc.stderr.strip() or proc.stdout[-500:]}")
    return json.loads(proc.stdout[proc.stdout.index("{"):])


class Exposed:
    """A ``trax lv expose`` process for the duration of a ``with`` block; always unmounted."""

    def __init__(self, home: Path, target: str):
        self.home, self.target = home, target
        self.mnt = tempfile.mkdtemp(prefix="trax-demo-")
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> str:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "traxfs.tools.cli", "--home", str(self.home), "lv", "expose", self.target, self.mnt],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "exposed as" not in line:
            self.proc.wait(timeout=30)
            raise VolumeError(f"could not expose {self.target}: {self.proc.stderr.read().strip()}")
        return os.path.join(self.mnt, "volume")

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.rmdir(self.mnt)


def _trax(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "traxfs.tools.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode not in (0,):
        raise VolumeError(f"trax {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout}")
    return proc


def _say(as_json: bool, text: str) -> None:
    if not as_json:
        print(text, flush=True)


def run_demo(workdir: str, size: int = 1 << 30, as_json: bool = False, rows: int = 200_000,
             volumes: bool = False) -> dict:
    work = Path(workdir).resolve()
    if work.exists():
        for mnt in work.glob("mnt*"):
            subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        shutil.rmtree(work)
    work.mkdir(parents=True)
    home = work / "home"
    reg = Registry(home)
    disks = [str(work / f"disk{i}.img") for i in range(DISKS)]
    for d in disks:
        pv_create(reg, d, size=size)
    VolumeGroup.create(reg, "demo", disks)
    report: dict = {"workdir": str(work), "disks": DISKS, "disk_size": size}
    if volumes:
        report["volumes"] = _volume_demo(reg, home, size // 8, as_json)
    report["filesystem"] = _filesystem_demo(reg, home, work, size * DISKS // 2, rows, as_json)
    report["atropos"] = _atropos_demo(home, work, as_json)
    (work / "report.json").write_text(json.dumps(report, indent=2))
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print(f"report: {work / 'report.json'}")
    return report


def _filesystem_demo(reg: Registry, home: Path, work: Path, fs_size: int, rows: int, as_json: bool) -> dict:
    from . import spark_job

    out: dict = {"volume": "demo/fs", "layout": "traxtent", "size": fs_size}
    with VolumeGroup.open(reg, "demo") as vg:
        vg.create_lv("fs", fs_size, "traxtent")
    _trax(home, "mkfs", "demo/fs", "--label", "demo")
    mnt = work / "mnt"
    mnt.mkdir()
    _trax(home, "mount", "demo/fs", str(mnt))
    _say(as_json, f"filesystem: demo/fs ({format_size(fs_size)}, traxtent) mounted on {mnt}")
    try:
        v = _fio([f"--filename={mnt / 'fio.dat'}", "--name=verify", "--size=64M", "--rw=write", "--bs=1M",
                  "--ioengine=psync", "--verify=crc32c", "--verify_state_save=0", "--do_verify=1",
                  "--verify_fatal=1", "--end_fsync=1"])
        out["fio_verify"] = {"errors": v["jobs"][0].get("error", 0),
                             "write_MBps": round(v["jobs"][0]["write"]["bw_bytes"] / 1e6, 1)}
        _say(as_json, f"fio: 64 MiB written and verified (crc32c) at {out['fio_verify']['write_MBps']} MB/s")
        _say(as_json, f"spark: {rows} rows -> Parquet and CSV through the mount ...")
        out["spark"] = spark_job.run(mnt / "spark", rows=rows)
        t = out["spark"]["timings_s"]
        _say(as_json, f"spark: write/read/overwrite/retry checked in {t['total']} s "
             f"(session {t['session']} s); retry: {out['spark']['retry']}")
        out["status"] = json.loads((mnt / ".trax" / "engine.json").read_text())
    finally:
        _trax(home, "umount", str(mnt))
    fsck = subprocess.run([sys.executable, "-m", "traxfs.tools.cli", "--home", str(home), "--json", "fsck",
                           "demo/fs"], capture_output=True, text=True, timeout=600)
    out["fsck"] = json.loads(fsck.stdout) if fsck.stdout.strip().startswith("{") else {"raw": fsck.stdout}
    if fsck.returncode != 0:
        raise VolumeError(f"fsck after the demo: exit {fsck.returncode}: {fsck.stdout} {fsck.stderr}")
    _say(as_json, f"unmounted; fsck clean ({out['fsck']['counts']})")
    return out


def _volume_demo(reg: Registry, home: Path, lv_size: int, as_json: bool) -> list[dict]:
    results = []
    with VolumeGroup.open(reg, "demo") as vg:
        for name, layout, opts in VOLUMES:
            vg.create_lv(name, lv_size, layout, **opts)
    for name, layout, _opts in VOLUMES:
        with VolumeGroup.open(reg, "demo", hold=READ) as vg:
            lv = vg.meta.lv(name)
            olv = vg.open_lv(name)
            entry = {"name": name, "layout": layout + ("+mirror" if lv.mirrored else ""),
                     "size": olv.size, "p_w": olv.mode_sense(), "boundaries(1000)": olv.boundaries(1000),
                     "rectangle(1000)": olv.rectangle(1000)}
        with Exposed(home, f"demo/{name}") as path:
            n = str(olv.size)
            common = [f"--filename={path}", f"--size={n}", "--ioengine=psync", "--direct=1"]
            v = _fio(["--name=verify", *common, "--rw=write", "--bs=256k", "--verify=crc32c", "--verify_state_save=0",
                      "--do_verify=1", "--verify_fatal=1"])
            entry["verify_errors"] = v["jobs"][0].get("error", 0)
            w = _fio(["--name=seqwrite", *common, "--rw=write", "--bs=1M", "--end_fsync=1"])
            r = _fio(["--name=seqread", *common, "--rw=read", "--bs=1M"])
            entry["write_MBps"] = round(w["jobs"][0]["write"]["bw_bytes"] / 1e6, 1)
            entry["read_MBps"] = round(r["jobs"][0]["read"]["bw_bytes"] / 1e6, 1)
        results.append(entry)
        _say(as_json, f"{name:<11} {entry['layout']:<15} {format_size(entry['size']):>8}  p,w={entry['p_w']}  "
             f"verify ok  write {entry['write_MBps']:>7} MB/s  read {entry['read_MBps']:>7} MB/s")
    with VolumeGroup.open(reg, "demo") as vg:
        for name, _layout, _opts in VOLUMES:
            vg.remove_lv(name)
    return results


def _atropos_demo(home: Path, work: Path, as_json: bool) -> dict:
    from ..volume.disk.geometry import DiskGeometry, DiskSpec
    from ..volume.disk.profiles import atlas10k3, scaled

    disks = [str(work / f"atlas{i}.img") for i in range(DISKS)]
    for d in disks:
        _trax(home, "pv", "create", d, "--model", "atlas10k3", "--cylinders-per-zone", "100")
    found = json.loads(_trax(home, "--json", "pv", "extract", disks[0]).stdout)
    stored = next(p["geometry"] for p in json.loads(_trax(home, "--json", "pv", "list").stdout) if p["path"] == disks[0])
    truth, got = DiskGeometry(scaled(atlas10k3(), 100)), DiskGeometry(DiskSpec.from_doc(stored["disk"]))
    exact = truth.tracks == got.tracks and all(
        truth.track_start(t) == got.track_start(t) and truth.skew_offset(t) == got.skew_offset(t)
        for t in range(truth.tracks))
    if not exact:
        raise VolumeError("trax pv extract did not recover the simulated disk's geometry")
    _say(as_json, f"atropos: extraction recovered {truth.tracks} tracks, {len(truth.spec.zones)} zones exactly "
         f"({found['probes']} timed reads)")
    _trax(home, "vg", "create", "atropos", *disks)
    _trax(home, "lv", "create", "atropos/q", "--size", "64M", "--layout", "quadrangle")
    shape = json.loads(_trax(home, "--json", "lv", "show", "atropos/q").stdout)["tracks"]
    _say(as_json, f"atropos: quadrangle volume p = {shape['p']}, w = {shape['w']}, d = {shape['d']}, "
         f"b = {shape['b']} sectors (N = {shape['N']}, H = {shape['H']})")
    out_dir = work / "atropos"
    bench = subprocess.run([sys.executable, "-m", "traxfs.tools.bench_atropos", "--quick", "--only",
                            "fig8,table2,integrity", "--out", str(out_dir)], capture_output=True, text=True, timeout=600)
    result = json.loads((out_dir / "report.json").read_text())
    if bench.returncode != 0:
        raise VolumeError(f"Atropos experiments: {result['failed']} check(s) failed:\n{bench.stdout[-3000:]}")
    for c in result["checks"]:
        if c["experiment"] == "fig8" and c["passed"] is not None:
            _say(as_json, f"atropos: {c['name']}: paper {c['paper']}, model {c['measured']:.2f} {c['unit']}")
    _say(as_json, f"atropos: {result['held']} held checks passed (paper vs model: {out_dir / 'report.json'})")
    return {"extraction": {"exact": exact, "probes": found["probes"]}, "quadrangle": shape,
            "checks": result["checks"]}

"""The main job (``trax demo``): the pipeline of ``tools/pipeline`` (queue → Spark streaming →
table → queries → snapshot → replay, on a quadrangle volume of simulated disks; see that package), then the
Atropos paper checks on the disk model (``traxfs.tools.bench_atropos --quick``: the paper's
values beside the model's), and a report (``report.json``, ``plots/*.png``, a text summary).

``--volumes`` also runs the volume-layer demo: one volume of each layout on image files, exposed
as a file through FUSE and driven by fio (crc32c verify, 1 MiB sequential write and read).
"""

from __future__ import annotations

import json
import os
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


def _say(as_json: bool, text: str) -> None:
    if not as_json:
        print(text, flush=True)


def run_demo(workdir: str, scale: float = 1.0, master: str | None = None, as_json: bool = False,
             volumes: bool = False, size: int = 1 << 30) -> dict:
    from .pipeline import run as pipeline

    report = pipeline.run(workdir, scale=scale, master=master, progress=not as_json)
    work = Path(report["workdir"])
    _say(as_json, pipeline.summary(report))
    report["atropos"] = _atropos_checks(work, as_json)
    if volumes:
        home = work / "volumes-home"
        reg = Registry(home)
        disks = [str(work / f"disk{i}.img") for i in range(DISKS)]
        for d in disks:
            pv_create(reg, d, size=size)
        VolumeGroup.create(reg, "demo", disks)
        report["volumes"] = _volume_demo(reg, home, size // 8, as_json)
    (work / "report.json").write_text(json.dumps(report, indent=2, default=str))
    if as_json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(f"report: {work / 'report.json'}")
    return report


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


def _atropos_checks(work: Path, as_json: bool) -> dict:
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
    return {"checks": result["checks"]}

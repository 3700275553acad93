"""The main job (``trax demo``): the volume manager end to end on image files.

Four sparse image files under a work folder become a volume group; one logical volume of each
layout is created, exposed through FUSE by a real ``trax lv expose`` process, and driven by fio
(a crc32c-verified write, then 1 MiB sequential write and read for throughput). The report
prints each volume's layout beside its numbers and is saved as ``report.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from traxfs.tools.sizes import format_size
from traxfs.volume.errors import VolumeError
from traxfs.volume.group import VolumeGroup
from traxfs.volume.registry import Registry
from traxfs.volume.scan import pv_create

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


def run_demo(workdir: str, size: int = 256 << 20, as_json: bool = False) -> dict:
    work = Path(workdir).resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    home = work / "home"
    reg = Registry(home)
    disks = [str(work / f"disk{i}.img") for i in range(DISKS)]
    for d in disks:
        pv_create(reg, d, size=size)
    VolumeGroup.create(reg, "demo", disks)
    lv_size = size // 4
    report: dict = {"workdir": str(work), "disks": DISKS, "disk_size": size, "volumes": []}
    with VolumeGroup.open(reg, "demo") as vg:
        for name, layout, opts in VOLUMES:
            vg.create_lv(name, lv_size, layout, **opts)
    for name, layout, _opts in VOLUMES:
        with VolumeGroup.open(reg, "demo", lock=False) as vg:
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
        report["volumes"].append(entry)
        if not as_json:
            print(f"{name:<11} {entry['layout']:<15} {format_size(entry['size']):>8}  p,w={entry['p_w']}  "
                  f"verify ok  write {entry['write_MBps']:>7} MB/s  read {entry['read_MBps']:>7} MB/s", flush=True)
    (work / "report.json").write_text(json.dumps(report, indent=2))
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print(f"report: {work / 'report.json'}")
    return report

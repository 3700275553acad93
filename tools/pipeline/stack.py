"""Step 1 and the end of the run: simulated disks, geometry by probing, one quadrangle volume, the
filesystem mounted by a real ``trax mount`` daemon; then unmount and fsck.

**One filesystem on one quadrangle volume.** Tables get the Atropos placement only on a
quadrangle volume, and a snapshot is of one filesystem: a table on one volume and the queue that
feeds it on another could not be frozen at one instant. So queues, tables, Spark's checkpoints
and plain files share one filesystem on the quadrangle volume; everything but the tables uses it
as any volume (its ``boundaries`` are the track rows, so streaming data is still track-aligned).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from ...volume.disk.geometry import DiskGeometry, DiskSpec
from ...volume.disk.profiles import atlas10k3, scaled
from ...volume.errors import VolumeError

DISKS = 4
CYLINDERS_PER_ZONE = 300  # zone 0 of each scaled Atlas 10K III: about 400 MB
VG, LV = "pipe", "fs"


def trax(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "traxfs.tools.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise VolumeError(f"trax {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout}")
    return proc


def build(home: Path, work: Path, size: str) -> dict:
    """Disks, extraction of disk 0 (checked against the model), the group, the quadrangle volume,
    mkfs. Returns what was built."""
    disks = [str(work / f"atlas{i}.img") for i in range(DISKS)]
    for d in disks:
        trax(home, "pv", "create", d, "--model", "atlas10k3", "--cylinders-per-zone", str(CYLINDERS_PER_ZONE))
    found = json.loads(trax(home, "--json", "pv", "extract", disks[0]).stdout)
    stored = next(p["geometry"] for p in json.loads(trax(home, "--json", "pv", "list").stdout) if p["path"] == disks[0])
    truth = DiskGeometry(scaled(atlas10k3(), CYLINDERS_PER_ZONE))
    got = DiskGeometry(DiskSpec.from_doc(stored["disk"]))
    exact = truth.tracks == got.tracks and all(
        truth.track_start(t) == got.track_start(t) and truth.skew_offset(t) == got.skew_offset(t)
        for t in range(truth.tracks))
    if not exact:
        raise VolumeError("trax pv extract did not recover the simulated disk's geometry")
    trax(home, "vg", "create", VG, *disks)
    trax(home, "lv", "create", f"{VG}/{LV}", "--size", size, "--layout", "quadrangle")
    shape = json.loads(trax(home, "--json", "lv", "show", f"{VG}/{LV}").stdout)["tracks"]
    trax(home, "mkfs", f"{VG}/{LV}", "--label", "pipeline")
    return {"disks": DISKS, "model": "atlas10k3", "cylinders_per_zone": CYLINDERS_PER_ZONE,
            "extraction": {"exact": exact, "tracks": truth.tracks, "zones": len(truth.spec.zones),
                           "probes": found["probes"]},
            "volume": f"{VG}/{LV}", "size": size, "quadrangle": shape}


def mount(home: Path, mnt: Path, options: list[str] | None = None) -> None:
    mnt.mkdir(exist_ok=True)
    trax(home, "mount", f"{VG}/{LV}", str(mnt), *(options or []))


def umount(home: Path, mnt: Path, patience: float = 30) -> None:
    """Unmount, retrying while the mount is busy: processes the run stopped (producers, Spark's
    JVM) may still be closing their files for a moment."""
    deadline = time.monotonic() + patience
    while True:
        try:
            trax(home, "umount", str(mnt))
            return
        except VolumeError as e:
            if "busy" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(1)


def fsck(home: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "traxfs.tools.cli", "--home", str(home), "--json", "fsck",
                           f"{VG}/{LV}"], capture_output=True, text=True, timeout=900)
    out = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {"raw": proc.stdout}
    if proc.returncode != 0:
        raise VolumeError(f"fsck after the pipeline: exit {proc.returncode}: {proc.stdout} {proc.stderr}")
    return out

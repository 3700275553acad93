"""The main job, ``trax demo`` (tools/pipeline), run as a user runs it: the command in a process of
its own (it starts and stops its own Spark session), at a small scale, with every check it makes
asserted from its report — and with Spark's ``local-cluster`` master (separate executor JVMs, a
real cluster protocol) — plus bad input that must be refused before anything is touched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

java = pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH (Spark needs Java 17+)")


def demo(workdir: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traxfs.tools.cli", "--json", "demo", "--workdir", str(workdir),
                           *args], capture_output=True, text=True, timeout=timeout)


def mounted_under(folder: Path) -> list[str]:
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[1].startswith(str(folder))]


def check_report(work: Path, proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout)
    assert report == json.loads((work / "report.json").read_text())
    assert report["ok"] is True and "error" not in report
    assert set(report["checks"]) == {"stream totals equal the generator's, exactly once",
                                     "Q1 and Q6 equal the pure-Python answers",
                                     "replay view read its window and caught up to live", "fsck clean",
                                     "a snapshot taken under writers reads the same in Spark during and without "
                                     "Spark after"}
    s = report["steps"]
    assert s["volumes"]["extraction"]["exact"] is True
    assert s["stream"]["starts"] == 2  # stopped and restarted from its checkpoint
    assert s["stream"]["micro_batches"] >= 1 and s["stream"]["buckets"] > 0
    assert s["lineitem_ingest"]["placement"].startswith("quadrangle")
    for q in ("Q1", "Q6"):
        r = report["queries"][q]
        assert r["projection"]["answer_matches"] and r["rows.csv"]["answer_matches"]
    snap = s["snapshot"]
    assert snap["during_writers"]["segment_records"] < s["produce"]["events"]
    assert {k: snap["during_writers"][k] for k in snap["after_writers"]} == snap["after_writers"]
    assert s["replay"]["live_records"] == 100 and s["replay"]["lag_after_commit"] == 0
    scans = report["disks"]["scans"]
    assert scans["Q6 projection"]["volume_bytes"] < scans["rows.csv"]["volume_bytes"]
    assert {m["column"] for m in report["disks"]["minipages"]} == set(report["disks"]["columns"])
    for png in report["plots"]:
        assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert mounted_under(work) == []
    return report


@java
@pytest.mark.timeout(900)
def test_pipeline_at_a_small_scale(tmp_path):
    work = tmp_path / "work"
    report = check_report(work, demo(work, "--scale", "0.04"))
    assert report["steps"]["produce"]["events"] == 4000
    # a second run replaces the folder it made
    assert (work / ".trax-demo").exists()


@java
@pytest.mark.timeout(900)
def test_pipeline_on_a_local_cluster(tmp_path):
    work = tmp_path / "work"
    check_report(work, demo(work, "--scale", "0.02", "--master", "local-cluster[2,1,1024]"))


def test_a_folder_the_demo_did_not_make_is_refused_and_left_alone(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    proc = demo(tmp_path, timeout=60)
    assert proc.returncode == 1
    assert "not made by trax demo" in json.loads(proc.stdout)["error"]
    assert sorted(os.listdir(tmp_path)) == ["precious.txt"]
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_unusable_work_folders_are_refused(tmp_path):
    (tmp_path / "a-file").write_text("x")
    for workdir, says in ((tmp_path / "a-file", "is not a folder"), (Path("/proc/traxfs-demo"), "cannot use")):
        proc = demo(workdir, timeout=60)
        assert proc.returncode == 1, proc.stdout
        assert says in json.loads(proc.stdout)["error"]
    assert (tmp_path / "a-file").read_text() == "x"


def test_a_mount_in_use_in_the_work_folder_is_refused(tmp_path):
    work = tmp_path / "work"
    (work / "mnt").mkdir(parents=True)
    (work / ".trax-demo").write_text("")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(work / "mnt")], check=True)
    try:
        (work / "mnt" / "inside").write_text("busy")
        proc = demo(work, timeout=60)
        assert proc.returncode == 1
        assert "is mounted" in json.loads(proc.stdout)["error"]
        assert (work / "mnt" / "inside").read_text() == "busy"
    finally:
        subprocess.run(["umount", str(work / "mnt")], check=True)


@java
@pytest.mark.timeout(300)
def test_a_demo_killed_mid_way_leaves_a_mount_the_next_run_names(tmp_path):
    """SIGKILL of ``trax demo`` once its filesystem is mounted: the mount daemon outlives it; the
    next run refuses the folder naming the mount and the command that unmounts it, which works."""
    work = tmp_path / "work"
    proc = subprocess.Popen([sys.executable, "-m", "traxfs.tools.cli", "--json", "demo", "--workdir", str(work),
                             "--scale", "0.02"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "TMPDIR": str(tmp_path)})  # the killed run's Spark scratch
    try:
        deadline = time.monotonic() + 180
        while not mounted_under(work):
            assert proc.poll() is None and time.monotonic() < deadline, "the demo never mounted its filesystem"
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait()
    mnt = mounted_under(work)[0]
    again = demo(work, timeout=60)
    assert again.returncode == 1
    error = json.loads(again.stdout)["error"]
    assert "is mounted" in error and f"trax umount {mnt}" in error
    assert mounted_under(work) == [mnt]
    umount = subprocess.run([sys.executable, "-m", "traxfs.tools.cli", "umount", mnt],  # as the message says
                            capture_output=True, text=True, timeout=120)
    assert umount.returncode == 0, umount.stderr
    assert mounted_under(work) == []

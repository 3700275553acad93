"""fs/process_status.py: the figures of a process (memory now and at its peak, CPU time, threads,
descriptors), of this process and of another one, and a clear error for a process that is gone.
"""

from __future__ import annotations

import mmap
import subprocess
import sys
import threading

import pytest

from traxfs.fs.process_status import process_status

MiB = 1 << 20


def test_own_figures_follow_what_the_process_does(tmp_path):
    before = process_status()
    assert before["rss_bytes"] > 0 and before["peak_rss_bytes"] >= before["rss_bytes"]
    assert before["vms_bytes"] >= before["rss_bytes"] and before["threads"] >= 1
    files = [open(tmp_path / f"f{i}", "w") for i in range(5)]  # noqa: SIM115 - held open on purpose
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        during = process_status()
        assert during["open_fds"] == before["open_fds"] + 5
        assert during["threads"] == before["threads"] + 1
    finally:
        stop.set()
        t.join()
        for f in files:
            f.close()
    block = mmap.mmap(-1, 96 * MiB)  # fresh pages from the kernel (the heap may hold resident free memory)
    for off in range(0, len(block), 4096):
        block[off] = 1  # touched, so resident
    grown = process_status()
    block.close()
    after = process_status()
    assert grown["rss_bytes"] >= before["rss_bytes"] + 80 * MiB
    # the peak stays after the unmap (the kernel's counters are kept in per-thread batches: a
    # few pages of slack)
    assert after["peak_rss_bytes"] >= grown["rss_bytes"] - 4 * MiB
    assert after["rss_bytes"] < grown["rss_bytes"] - 80 * MiB
    assert after["cpu_user_s"] + after["cpu_system_s"] > 0


def test_another_process_and_one_that_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        st = process_status(child.pid)
        assert st["pid"] == child.pid and st["threads"] == 1 and st["rss_bytes"] > 0
    finally:
        child.communicate(b"")
    with pytest.raises(ProcessLookupError, match=f"no process {child.pid}"):
        process_status(child.pid)


@pytest.mark.timeout(120)
def test_the_mount_reports_its_server_process(tmp_path):
    """``/.trax/filesystem.json`` carries the figures of the process serving the mount (the
    daemon, not whoever reads the file): its pid, and the memory, threads and descriptors it holds."""
    import json

    from fsmount import traxfs_mount

    with traxfs_mount(tmp_path) as m:
        doc = json.loads((m.mp / ".trax" / "filesystem.json").read_text())["process"]
        assert doc["pid"] == m.proc.pid
        assert 0 < doc["rss_bytes"] <= doc["peak_rss_bytes"] <= doc["vms_bytes"]
        assert doc["threads"] >= 2 and doc["open_fds"] >= 3

"""The pass-through baseline (tools/passthrough.py): a real FUSE mount served by a child process.

The mount mirrors a source directory, so each check looks at both sides: what a client sees
through the mount, and what landed in the source. Every mount is removed and every server
ended by the fixture (by PID), whether the test passed or not.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traxfs.tools.passthrough import _in_mount_table, mounted

MiB = 1024 * 1024
SERVER = [sys.executable, "-m", "traxfs.tools.passthrough"]


@pytest.fixture
def pt(tmp_path: Path):
    """``(source, mountpoint)`` with the pass-through serving ``source`` at ``mountpoint``."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    with mounted(src, mnt):
        yield src, mnt
    assert not _in_mount_table(str(mnt))


def _wait_unmounted(mnt: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while _in_mount_table(str(mnt)):
        assert time.monotonic() < deadline, f"{mnt} still mounted"
        time.sleep(0.05)


@pytest.mark.timeout(60)
def test_file_and_directory_operations(pt):
    src, mnt = pt
    (mnt / "a").write_bytes(b"hello")
    assert (src / "a").read_bytes() == b"hello"
    (src / "outside").write_text("made in the source")  # the mirror shows the source as it is
    assert (mnt / "outside").read_text() == "made in the source"

    # a directory renamed with its subtree: children stay reachable under the new name
    (mnt / "d" / "e").mkdir(parents=True)
    (mnt / "d" / "e" / "f").write_text("deep")
    (mnt / "d").rename(mnt / "d2")
    assert (mnt / "d2" / "e" / "f").read_text() == "deep"
    assert (src / "d2" / "e" / "f").read_text() == "deep"
    assert not (mnt / "d").exists()
    assert sorted(os.listdir(mnt)) == ["a", "d2", "outside"]

    # rename over an existing file replaces it
    (mnt / "b").write_text("bee")
    (mnt / "b").rename(mnt / "a")
    assert (mnt / "a").read_text() == "bee" and not (mnt / "b").exists()

    # links
    os.link(mnt / "a", mnt / "hard")
    assert os.stat(mnt / "a").st_nlink == 2 and os.stat(mnt / "hard").st_ino == os.stat(mnt / "a").st_ino
    os.symlink("a", mnt / "sym")
    assert os.readlink(mnt / "sym") == "a" and (mnt / "sym").read_text() == "bee"
    assert os.readlink(src / "sym") == "a"

    # attributes
    os.chmod(mnt / "a", 0o640)
    assert os.stat(src / "a").st_mode & 0o777 == 0o640
    os.utime(mnt / "a", ns=(1_000_000_000, 2_000_000_000))
    assert os.stat(mnt / "a").st_mtime_ns == 2_000_000_000
    os.truncate(mnt / "a", 1)
    assert (mnt / "a").read_bytes() == b"b"
    with open(mnt / "a", "r+b") as f:  # ftruncate: the setattr that carries a file handle
        os.ftruncate(f.fileno(), 3)
    assert (src / "a").read_bytes() == b"b\0\0"
    os.utime(mnt / "sym", ns=(5_000_000_000, 6_000_000_000), follow_symlinks=False)
    assert os.lstat(src / "sym").st_mtime_ns == 6_000_000_000
    assert os.stat(src / "a").st_mtime_ns != 6_000_000_000  # not followed
    if os.geteuid() == 0:
        os.lchown(mnt / "sym", 1234, 1234)
        assert (os.lstat(src / "sym").st_uid, os.stat(src / "a").st_uid) == (1234, 0)

    # an unlinked file stays usable while open
    with open(mnt / "hard", "r+b") as f:
        os.unlink(mnt / "hard")
        f.write(b"still here")
        f.flush()
        assert os.fstat(f.fileno()).st_size == len(b"still here")
        f.seek(0)
        assert f.read() == b"still here"
    assert not (src / "hard").exists()

    # errors come back as the host's errno
    with pytest.raises(OSError) as e:
        os.rmdir(mnt / "d2")
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(FileNotFoundError):
        os.stat(mnt / "missing")
    (mnt / "d2" / "e" / "f").unlink()
    os.rmdir(mnt / "d2" / "e")
    os.rmdir(mnt / "d2")
    assert sorted(os.listdir(src)) == ["a", "outside", "sym"]

    st, host = os.statvfs(mnt), os.statvfs(src)
    assert (st.f_blocks, st.f_frsize) == (host.f_blocks, host.f_frsize)


@pytest.mark.timeout(60)
def test_large_directory_listing(pt):
    """More entries than one readdir reply holds: listed once each, none skipped."""
    src, mnt = pt
    names = {f"file-{i:05d}-{'x' * 40}" for i in range(1500)}
    for n in names:
        (src / n).touch()
    assert set(os.listdir(mnt)) == names


@pytest.mark.timeout(120)
def test_dd_round_trip_64mib(pt, tmp_path):
    src, mnt = pt
    data = tmp_path / "data"
    data.write_bytes(os.urandom(64 * MiB))
    want = hashlib.sha256(data.read_bytes()).hexdigest()
    subprocess.run(["dd", f"if={data}", f"of={mnt / 'big'}", "bs=1M", "conv=fsync", "status=none"],
                   check=True, timeout=100)
    back = tmp_path / "back"
    subprocess.run(["dd", f"if={mnt / 'big'}", f"of={back}", "bs=1M", "status=none"], check=True, timeout=100)
    assert hashlib.sha256(back.read_bytes()).hexdigest() == want
    assert hashlib.sha256((src / "big").read_bytes()).hexdigest() == want
    assert os.stat(mnt / "big").st_size == 64 * MiB
    # O_DIRECT (what fio --direct=1 and databases use) is served too
    subprocess.run(["dd", f"if={mnt / 'big'}", f"of={mnt / 'direct'}", "bs=1M", "count=8", "iflag=direct",
                    "oflag=direct", "status=none"], check=True, timeout=100)
    assert (src / "direct").read_bytes() == data.read_bytes()[:8 * MiB]


@pytest.mark.timeout(60)
def test_sigterm_unmounts(tmp_path):
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    with mounted(src, mnt) as proc:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        _wait_unmounted(mnt)


@pytest.mark.timeout(60)
def test_background_mode_detaches_once_live(tmp_path):
    """Without --foreground the command returns only when the mount is live, naming the PID of
    the server it leaves running; fusermount3 -u ends that server."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    (src / "x").write_text("x")
    res = subprocess.run(SERVER + [str(src), str(mnt)], capture_output=True, text=True, timeout=30)
    m = re.search(r"\(pid (\d+)\)", res.stdout)
    pid = int(m.group(1)) if m else None
    try:
        assert res.returncode == 0, res.stderr
        assert pid is not None, res.stdout
        assert (mnt / "x").read_text() == "x"  # live as soon as the command returned
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True, timeout=30)
        deadline = time.monotonic() + 15
        while _pid_alive(pid):
            assert time.monotonic() < deadline, "server still running after fusermount3 -u"
            time.sleep(0.05)
    finally:
        if pid is not None and _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        if _in_mount_table(str(mnt)):
            subprocess.run(["fusermount3", "-uz", str(mnt)], timeout=30)


@pytest.mark.timeout(30)
def test_background_mode_reports_failure(tmp_path):
    (tmp_path / "mnt").mkdir()
    res = subprocess.run(SERVER + [str(tmp_path / "nowhere"), str(tmp_path / "mnt")],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 1 and "not a directory" in res.stderr
    assert not _in_mount_table(str(tmp_path / "mnt"))


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as ended: the detached server is not our child)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


LATE_PROBE = """
import os, signal, sys, time
from traxfs.fs.fuse import loop
from traxfs.tools import passthrough

probe = loop._probe

def late_probe(path, ready):
    # the readiness probe's thread starts only after a SIGTERM ended the loop (a loaded machine)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1.0)
    probe(path, ready)

loop._probe = late_probe
passthrough.serve(sys.argv[1], sys.argv[2])
print("served", flush=True)
"""


@pytest.mark.timeout(90)
def test_sigterm_before_the_readiness_probe_still_ends_the_server(tmp_path):
    """A SIGTERM that ends the loop before the readiness probe's stat is sent: the server still
    unmounts and exits (it used to wait for the probe's thread, whose stat nobody answered)."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", LATE_PROBE, str(src), str(mnt)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=15)
        pytest.fail("the server hung after SIGTERM: its loop waited for the readiness probe")
    finally:
        if _in_mount_table(str(mnt)):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True, timeout=30)
    assert proc.returncode == 0 and "served" in out, err
    _wait_unmounted(mnt)

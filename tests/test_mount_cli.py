"""`trax mount`, `trax umount` and `trax lv expose` against hostile names, dead mounts and
other homes: real processes, real FUSE mounts, image files under ``tmp_path``.

* A path never becomes a mount option: an image named ``x,allow_other`` mounts without
  ``allow_other``; commas, spaces, ``=``, backslashes, non-ASCII and undecodable bytes in the
  image path or the mount point mount and unmount, and the mount table shows the path.
* A server killed with SIGKILL leaves a dead mount: ``trax mount`` on it says what to run,
  ``trax umount`` removes it, and the next mount recovers.
* ``trax umount`` waits for the server whatever ``TRAX_HOME`` mounted it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_fs_tools
from test_fs_tools import FUSERMOUNT, MiB, Rig, alive, wait_gone

from traxfs.fs.subtrees.status_files import FRESH
from traxfs.tools.cli import main
from traxfs.tools.fs_commands import _pidfile_server
from traxfs.tools.mounts import find_mount, fuse_servers
from traxfs.volume.registry import Registry

pytestmark = pytest.mark.timeout(90)
rig = test_fs_tools.rig  # the fixture: a home, images and mount points that teardown clears


def mount_line(mp: Path) -> tuple[bytes, bytes]:
    """(source, options) of the mount at ``mp`` from the kernel's table, as raw bytes."""
    target = os.fsencode(os.path.realpath(mp)).replace(b"\\", b"\\134").replace(b" ", b"\\040")
    with open("/proc/self/mounts", "rb") as f:
        for line in f:
            source, where, _, options = line.split()[:4]
            if where == target:
                return source, options
    raise AssertionError(f"{mp} is not in /proc/self/mounts")


def kernel_escape(raw: bytes) -> bytes:
    """How /proc/mounts writes a field: space, tab, newline and backslash as octal."""
    for ch in b"\\ \t\n":
        raw = raw.replace(bytes([ch]), b"\\%03o" % ch)
    return raw


HOSTILE = [
    pytest.param("x,allow_other", id="comma-option"),
    pytest.param("a,b.img", id="comma"),
    pytest.param("sp ace=eq\\back.img", id="space-equals-backslash"),
    pytest.param("café-ü.img", id="utf8"),
    pytest.param(os.fsdecode(b"bad\xff\xfe.img"), id="undecodable"),
]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_path_never_becomes_a_mount_option(rig: Rig, name: str) -> None:
    folder = rig.tmp / "t"
    folder.mkdir()
    image = folder / name
    rig.mkfs(image)
    mp = rig.mountpoint(os.fsdecode(b"mnt " + os.fsencode(name)))
    pid = rig.mount(mp, image=image)
    entry = find_mount(str(mp))
    assert entry is not None and entry.is_traxfs
    # both ways trax umount finds the server: the kernel's FUSE connection, and this home's pidfile
    assert fuse_servers(entry) == {pid} and _pidfile_server(Registry(rig.home), str(mp)) == {pid}
    source, options = mount_line(mp)
    assert b"allow_other" not in options.split(b","), options
    assert source == b"traxfs:" + kernel_escape(os.fsencode(str(image))), source
    (mp / "f").write_bytes(b"through the mount")
    r = rig.run("umount", mp)
    assert r.returncode == 0, r.stderr
    assert not alive(pid) and find_mount(str(mp)) is None


def test_a_dead_mount_is_named_then_cleared_and_the_next_mount_recovers(rig: Rig) -> None:
    rig.mkfs()
    mp = rig.mountpoint()
    pid = rig.mount(mp)
    with open(mp / "kept", "wb") as f:
        f.write(b"durable before the crash")
        f.flush()
        os.fsync(f.fileno())
    held = os.open(mp / "kept", os.O_RDONLY)  # keeps the dead mount busy: plain unmount fails
    try:
        os.kill(pid, signal.SIGKILL)
        assert wait_gone(pid)
        assert find_mount(str(mp)) is not None and not os.path.ismount(mp)
        r = rig.run("mount", rig.image, mp)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert (f"{mp}: a dead traxfs mount is still attached (its server died); run 'trax umount {mp}' first"
                in r.stderr), r.stderr
        r = rig.run("--json", "umount", mp)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["dead"] and doc["lazy"], doc
        assert find_mount(str(mp)) is None
    finally:
        with contextlib.suppress(OSError):  # its flush fails: the server is gone
            os.close(held)
        if find_mount(str(mp)) is not None:
            subprocess.run([FUSERMOUNT, "-uz", str(mp)], capture_output=True)
    pid = rig.mount(mp)  # recovery runs: the fsync'd file is there
    assert (mp / "kept").read_bytes() == b"durable before the crash"
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid)
    r = rig.run("umount", mp)  # not busy this time: removed at once, said in words
    assert r.returncode == 0 and f"{mp}: removed the dead mount of a server that had died" in r.stdout, r.stdout
    assert find_mount(str(mp)) is None
    assert rig.run("fsck", rig.image).returncode == 0


def test_a_failed_mount_shows_only_its_own_log_lines(rig: Rig) -> None:
    rig.mkfs()
    mp = rig.mountpoint()
    log = rig.tmp / "server.log"
    rig.mount(mp, "--log", log)
    rig.ok("umount", mp)
    assert "closed cleanly" in log.read_text()
    rig.image.write_bytes(b"\0" * (16 * MiB))  # no longer a filesystem
    r = rig.run("mount", rig.image, mp, "--log", log)
    assert r.returncode == 1 and "no traxfs engine superblock" in r.stderr, r.stderr
    assert "mounted on" not in r.stderr and "closed cleanly" not in r.stderr, r.stderr
    assert "trax: error: mount of" in r.stderr and r.stderr.count("trax: error:") == 1, r.stderr


def test_expose_refuses_a_busy_mount_point_and_keeps_nothing_locked(rig: Rig) -> None:
    rig.mkfs()
    mp = rig.mountpoint()
    rig.mount(mp)
    disk = str(rig.tmp / "d0.img")
    home = ["--home", str(rig.home)]
    assert main([*home, "pv", "create", disk, "--size", "32M"]) == 0
    assert main([*home, "vg", "create", "vg0", disk]) == 0
    assert main([*home, "lv", "create", "vg0/lv", "--size", "8M"]) == 0
    r = rig.run("lv", "expose", "vg0/lv", mp)
    assert r.returncode == 1 and f"{mp}: something is already mounted there (fuse.traxfs" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    rig.ok("lv", "remove", "vg0/lv")  # the group was left unlocked
    rig.ok("umount", mp)


def test_status_files_are_as_long_as_what_a_read_returns(rig: Rig) -> None:
    """st_size of every /.trax file is the number of bytes a read then returns, whole JSON:
    stat then read st_size bytes (Spark), open then fstat, `stat; cat` in a shell, cat alone,
    two readers interleaved, and a reader in a loop sees fresh contents."""
    rig.mkfs()
    mp = rig.mountpoint()
    rig.mount(mp)
    trax_dir = mp / ".trax"
    for name in sorted(os.listdir(trax_dir)):
        path = trax_dir / name
        size = os.stat(path).st_size  # stat, then open and read exactly st_size bytes
        assert size > 0, name
        with open(path, "rb", buffering=0) as f:
            data = f.read(size)
            assert f.read(1) == b"", f"{name}: more bytes than st_size {size}"
            assert os.fstat(f.fileno()).st_size == size
        assert len(data) == size and json.loads(data) is not None, name
        with open(path, "rb", buffering=0) as f:  # open, then fstat, then read st_size bytes
            size = os.fstat(f.fileno()).st_size
            assert len(f.read(size + 4096)) == size, name
        out = subprocess.run(["sh", "-c", 'stat -c %s "$1"; cat "$1"', "sh", str(path)], capture_output=True,
                             check=True).stdout
        told, _, body = out.partition(b"\n")
        assert int(told) == len(body) and json.loads(body) is not None, (name, told, len(body))
        body = subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout
        assert json.loads(body) is not None, name
    path = trax_dir / "filesystem.json"
    first = os.stat(path).st_size  # reader 1 is told a size ...
    other = subprocess.run([sys.executable, "-c", "import json, os, sys; p = sys.argv[1]; s = os.stat(p).st_size; "
                            "d = open(p, 'rb').read(); assert len(d) == s, (len(d), s); "
                            "print(json.loads(d)['transactions'])", str(path)], capture_output=True, text=True)
    assert other.returncode == 0, other.stderr  # ... reader 2 stats and reads in between ...
    (mp / "between").write_bytes(b"x")  # ... the filesystem changes, time passes ...
    time.sleep(FRESH + 0.2)
    with open(path, "rb") as f:  # ... and reader 1 reads what it was told the size of
        data = f.read()
    assert len(data) == first and json.loads(data)["transactions"] == int(other.stdout), (first, data)
    seen = []
    for i in range(3):  # a reader in a loop, with a change in between, sees each change at once
        seen.append(json.loads(path.read_bytes())["transactions"])
        (mp / f"new{i}").write_bytes(b"x")
    assert seen[0] < seen[1] < seen[2], f"a reader in a loop saw stale contents: {seen}"
    rig.ok("umount", mp)

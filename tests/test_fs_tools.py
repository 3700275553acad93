"""`trax mkfs`, `trax mount`, `trax umount` and `trax fsck` as a user drives them: real processes,
real FUSE mounts, image files under ``tmp_path``.

What is promised (man/trax-mkfs.8, trax-mount.8, trax-umount.8, trax-fsck.8):

* a mount runs as a daemon; ``trax umount`` returns only once the server has closed the
  filesystem and exited, so the image is free and needs no recovery;
* anything that is not a healthy traxfs is refused by mount with exit 1, a message naming the
  problem, nothing mounted and the image byte-identical (checked by sha256);
* a filesystem in use (mounted) cannot be mounted again, checked or formatted over;
* fsck uses e2fsck's exit codes: 0 clean, 1 corrected, 4 left uncorrected, 8 operational.

Every mount a test makes is registered with the ``rig`` fixture, whose teardown unmounts it and
stops the server it started (by PID) even when the test failed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fsmount import trax

from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.superblock import COPIES
from traxfs.fs.filesystem import ROOT_INO, FileSystem
from traxfs.fs.keys import U64, cookie_key, dirent_key, ino_key
from traxfs.fs.subtrees.status_files import STATUS_FILES
from traxfs.fs.trees import KEY_SUPER, VERSION
from traxfs.tools.cli import main
from traxfs.volume.device import ImageFileDevice

pytestmark = pytest.mark.timeout(180)  # many CLI processes per test: slow on a loaded machine

MiB = 1 << 20
SIZE = 64 * MiB
FUSERMOUNT = shutil.which("fusermount3")
if FUSERMOUNT is None or not os.path.exists("/dev/fuse"):
    pytest.skip("FUSE (fusermount3, /dev/fuse) is not available", allow_module_level=True)


def expect(ok: bool, text: str) -> None:
    assert ok, text


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(4 * MiB), b""):
            h.update(block)
    return h.hexdigest()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class Rig:
    """A trax home, image files and mount points under ``tmp_path``; remembers every mount
    point and server PID so that teardown leaves nothing behind."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.home = tmp_path / "home"
        self.image = tmp_path / "fs.img"
        self.mountpoints: list[Path] = []
        self.pids: set[int] = set()

    def mountpoint(self, name: str = "mnt") -> Path:
        mp = self.tmp / name
        mp.mkdir(exist_ok=True)
        self.mountpoints.append(mp)
        return mp

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return trax(*map(str, args), home=self.home, check=False, timeout=60)

    def ok(self, *args: str) -> subprocess.CompletedProcess:
        r = self.run(*args)
        assert r.returncode == 0, (args, r.stdout, r.stderr)
        return r

    def mkfs(self, image: Path | None = None, *extra: str) -> str:
        doc = json.loads(self.ok("--json", "mkfs", image or self.image, "--size", str(SIZE), *extra).stdout)
        return doc["uuid"]

    def mount(self, mp: Path, *extra: str, image: Path | str | None = None) -> int:
        """``trax mount`` (daemon); returns the server's PID."""
        r = self.ok("--json", "mount", image or self.image, mp, *extra)
        pid = json.loads(r.stdout)["pid"]
        self.pids.add(pid)
        assert os.path.ismount(mp) and alive(pid)
        return pid

    def cleanup(self) -> None:
        for pid in self.pids:  # a stopped server would hang every stat of its mount point
            if alive(pid):
                os.kill(pid, signal.SIGCONT)
        for mp in self.mountpoints:
            if os.path.ismount(mp):
                subprocess.run([FUSERMOUNT, "-u", str(mp)], capture_output=True)
            if os.path.ismount(mp):
                subprocess.run([FUSERMOUNT, "-uz", str(mp)], capture_output=True)
        for pid in self.pids:
            if not wait_gone(pid, 20) and alive(pid):
                os.kill(pid, signal.SIGKILL)
                wait_gone(pid, 10)


@pytest.fixture
def rig(tmp_path: Path):
    r = Rig(tmp_path)
    try:
        yield r
    finally:
        r.cleanup()
    left = [str(mp) for mp in r.mountpoints if os.path.ismount(mp)]
    assert not left, f"mounts left behind: {left}"


def in_process(image: Path):
    """Open the (unmounted) image's filesystem in this process: for building or damaging it."""
    dev = ImageFileDevice(str(image))
    return dev, FileSystem.open(dev, where=str(image))


# ----- the normal life of a filesystem ---------------------------------------------------------
def test_mkfs_mount_write_umount_remount_fsck(rig: Rig) -> None:
    uuid = rig.mkfs(None, "--label", "tools")
    assert rig.image.stat().st_size == SIZE
    mp = rig.mountpoint()
    log = rig.tmp / "server.log"
    pid = rig.mount(mp, "--log", log)
    blob = os.urandom(3 * MiB + 123)
    (mp / "hello.txt").write_text("hello, traxfs\n")
    (mp / "d").mkdir()
    (mp / "d" / "blob").write_bytes(blob)
    os.symlink("d/blob", mp / "link")
    assert sorted(os.listdir(mp)) == [".snapshots", ".trax", "d", "hello.txt", "link", "queues", "tables"]

    r = rig.ok("umount", mp)
    assert not alive(pid), "trax umount returned before the server exited"
    assert not os.path.ismount(mp)
    text = log.read_text()
    assert f"mounted on {mp}" in text and "closed cleanly" in text, text

    pid = rig.mount(mp, "--log", log)  # the image is free at once: no "in use"
    assert (mp / "hello.txt").read_text() == "hello, traxfs\n"
    assert (mp / "d" / "blob").read_bytes() == blob
    assert os.readlink(mp / "link") == "d/blob"
    assert json.loads((mp / ".trax" / "filesystem.json").read_text())["uuid"] == uuid
    vol = json.loads((mp / ".trax" / "volume.json").read_text())
    assert (vol["target"], vol["kind"], vol["size"]) == (str(rig.image), "image file", SIZE)
    rig.ok("umount", mp)
    assert not alive(pid)

    r = rig.run("fsck", rig.image)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stdout.strip().endswith("clean")
    r = rig.run("--json", "fsck", rig.image)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 0 and doc["problems"] == [] and doc["repaired"] == []
    # root, hello.txt, d, blob, link; every name but the root's (/queues and /tables are subtrees)
    assert doc["counts"]["inodes"] == 5 and doc["counts"]["entries"] == 4
    assert doc["counts"]["data_pages"] >= (3 * MiB) // 4096


def test_on_a_logical_volume_status_files_and_snapshots_dir(rig: Rig) -> None:
    """The target is a VG/LV here: its volume group stays locked while mounted."""
    disks = [str(rig.tmp / f"d{i}.img") for i in range(2)]
    home = ["--home", str(rig.home)]
    assert main([*home, "pv", "create", *disks, "--size", "64M"]) == 0
    assert main([*home, "vg", "create", "vg0", *disks]) == 0
    assert main([*home, "lv", "create", "vg0/fs", "--size", "48M", "--layout", "striped"]) == 0
    uuid = json.loads(rig.ok("--json", "mkfs", "vg0/fs", "--label", "status").stdout)["uuid"]
    mp = rig.mountpoint()
    rig.mount(mp, image="vg0/fs")
    with open(mp / "f", "wb") as f:
        f.write(b"x" * 10000)
        f.flush()
        os.fsync(f.fileno())
    assert sorted(os.listdir(mp / ".trax")) == sorted(STATUS_FILES)  # (the documents are taken here)
    docs = {name: json.loads((mp / ".trax" / name).read_text()) for name in STATUS_FILES}
    assert {"filesystem", "data", "log", "buffer", "locks", "active_transactions"} <= docs["engine.json"].keys()
    assert {"durable_lsn", "trunc_lsn", "reserved_lsn"} <= docs["log.json"].keys()
    assert docs["log.json"]["flush_path"] == "python"  # a logical volume offers no single direct descriptor
    assert {"resident", "dirty"} <= docs["buffer.json"].keys()
    assert {"track_pages", "quarantined_pages"} <= docs["data.json"].keys()
    fsdoc = docs["filesystem.json"]
    assert {"uuid", "label", "version", "transactions", "aborts", "fsyncs", "cached_inodes",
            "referenced_inodes"} <= fsdoc.keys()
    assert (fsdoc["uuid"], fsdoc["label"], fsdoc["version"]) == (uuid, "status", VERSION)
    assert fsdoc["transactions"] >= 1 and fsdoc["fsyncs"] >= 1
    assert docs["engine.json"]["filesystem"]["uuid"] == uuid
    vol = docs["volume.json"]
    assert (vol["target"], vol["kind"], vol["size"], vol["layout"], vol["stripes"]) == (
        "vg0/fs", "logical volume", 48 * MiB, "striped", 2)
    assert vol["devices"] == sorted(disks)
    with pytest.raises(OSError) as e:
        (mp / ".trax" / "x").write_text("no")
    assert e.value.errno in (errno.EPERM, errno.EACCES, errno.EROFS)
    assert os.listdir(mp / ".snapshots") == []
    (mp / ".snapshots" / "snap1").mkdir()  # takes a snapshot (fs/subtrees/snapshots.py)
    assert os.listdir(mp / ".snapshots") == ["snap1"]
    with pytest.raises(OSError) as e:
        (mp / ".snapshots" / "snap1" / "x").write_text("no")
    assert e.value.errno == errno.EROFS

    r = rig.run("lv", "remove", "vg0/fs")  # the mounted volume cannot be removed under it
    assert r.returncode == 1 and "in use" in r.stderr, r.stderr
    r = rig.run("fsck", "vg0/fs")
    assert r.returncode == 8 and "in use" in r.stderr, r.stderr
    rig.ok("umount", mp)
    r = rig.run("fsck", "vg0/fs")
    assert r.returncode == 0 and r.stdout.startswith("vg0/fs: "), (r.stdout, r.stderr)


def test_on_a_quadrangle_volume_of_simulated_disks(rig: Rig) -> None:
    """The whole stack on Atropos volumes: simulated Atlas disks, a quadrangle volume (its size
    what the usable tracks hold, its stripe unit a track row), a filesystem mounted on it, data
    back after a remount, fsck clean; /.trax/volume.json reports the track row."""
    disks = [str(rig.tmp / f"atlas{i}.img") for i in range(2)]
    home = ["--home", str(rig.home)]
    for d in disks:
        assert main([*home, "pv", "create", d, "--model", "atlas10k3", "--cylinders-per-zone", "30"]) == 0
    assert main([*home, "vg", "create", "sim", *disks]) == 0
    assert main([*home, "lv", "create", "sim/q", "--size", "40M", "--layout", "quadrangle"]) == 0
    rig.ok("mkfs", "sim/q")
    mp = rig.mountpoint()
    rig.mount(mp, image="sim/q")
    data = os.urandom(3 * MiB + 12345)
    (mp / "dir").mkdir()
    (mp / "dir" / "f").write_bytes(data)
    vol = json.loads((mp / ".trax" / "volume.json").read_text())
    assert (vol["layout"], vol["stripes"], vol["stripe_unit"]) == ("quadrangle", 2, 85 * 8 * 512)
    rig.ok("umount", mp)
    rig.mount(mp, image="sim/q")
    assert (mp / "dir" / "f").read_bytes() == data
    rig.ok("umount", mp)
    r = rig.run("fsck", "sim/q")
    assert r.returncode == 0, (r.stdout, r.stderr)


# ----- what mount must refuse, changing nothing -----------------------------------------------
def _damaged_engine_superblock(image: Path) -> None:
    dev = ImageFileDevice(str(image), SIZE, create=True)
    FileSystem.mkfs(dev)
    dev.close()
    with open(image, "r+b") as f:
        for off in COPIES:  # version and page size of both copies: their checksums no longer match
            f.seek(off + 8)
            raw = f.read(8)
            f.seek(off + 8)
            f.write(bytes(b ^ 0x5A for b in raw))


def _random_bytes(image: Path) -> None:
    image.write_bytes(os.urandom(16 * MiB))


def _zeros(image: Path) -> None:
    with open(image, "wb") as f:
        f.truncate(SIZE)


def _engine_without_filesystem(image: Path) -> None:
    dev = ImageFileDevice(str(image), SIZE, create=True)
    Engine.format(dev, log_size=16 * MiB, name="other")
    Engine.open(dev, name="other").close()
    dev.close()


def _damaged_fs_superblock_record(image: Path) -> None:
    dev = ImageFileDevice(str(image), SIZE, create=True)
    FileSystem.mkfs(dev)
    dev.close()
    dev, fs = in_process(image)
    raw = fs.t["meta"].get(KEY_SUPER)
    with fs.repair.transaction() as ftx:  # deliberate damage
        fs.t["meta"].put(ftx.tx, KEY_SUPER, b"XXXXXXXX" + raw[8:])
    fs.close()
    dev.close()


def _empty(image: Path) -> None:
    image.write_bytes(b"")


REFUSED = [
    pytest.param(_empty, "too small to hold a traxfs filesystem (0 bytes)", id="empty"),
    pytest.param(_damaged_engine_superblock, "superblock checksum mismatch", id="damaged-engine-superblock"),
    pytest.param(_random_bytes, "no traxfs engine superblock", id="random-bytes"),
    pytest.param(_zeros, "no traxfs engine superblock", id="zeros"),
    pytest.param(_engine_without_filesystem, "holds no traxfs filesystem", id="engine-without-fs"),
    pytest.param(_damaged_fs_superblock_record, "filesystem superblock magic", id="damaged-fs-record"),
]


@pytest.mark.parametrize(("make", "message"), REFUSED)
def test_mount_and_fsck_refuse_what_is_not_a_healthy_traxfs(rig: Rig, make, message: str) -> None:
    make(rig.image)
    before = sha256(rig.image)
    mp = rig.mountpoint()
    r = rig.run("mount", rig.image, mp, "--log", rig.tmp / "server.log")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert message in r.stderr and "Traceback" not in r.stderr and "overlay" not in r.stderr, r.stderr
    assert f"mount of {rig.image}" in r.stderr
    assert not os.path.ismount(mp)
    changed = [] if sha256(rig.image) == before else ["mount"]
    r = rig.run("fsck", rig.image)
    assert r.returncode == 8, (r.stdout, r.stderr)
    assert message in r.stderr and "Traceback" not in r.stderr and "overlay" not in r.stderr, r.stderr
    if not changed and sha256(rig.image) != before:
        changed.append("fsck")
    expect(not changed, f"refused {' and '.join(changed)} changed the image")


# ----- mkfs ------------------------------------------------------------------------------------
def test_mkfs_refuses_an_existing_filesystem_without_force(rig: Rig) -> None:
    old = rig.mkfs()
    dev, fs = in_process(rig.image)
    fs.write(fs.create(ROOT_INO, b"precious", 0o644, 0, 0).ino, 0, b"keep me")
    fs.close()
    dev.close()
    before = sha256(rig.image)
    r = rig.run("mkfs", rig.image)
    assert r.returncode == 1 and "--force" in r.stderr and str(rig.image) in r.stderr, r.stderr
    assert sha256(rig.image) == before

    r = rig.ok("--json", "mkfs", rig.image, "--force", "--label", "fresh")
    new = json.loads(r.stdout)["uuid"]
    assert new != old
    dev, fs = in_process(rig.image)
    try:
        assert (fs.sb.uuid, fs.sb.label) == (new, "fresh")
        assert sorted(name for name, _, _ in fs.readdir(ROOT_INO, 0)) == [b".snapshots", b".trax", b"queues", b"tables"]
    finally:
        fs.close()
        dev.close()


def test_mkfs_refuses_an_engine_of_another_use_without_force(rig: Rig) -> None:
    _engine_without_filesystem(rig.image)
    before = sha256(rig.image)
    r = rig.run("mkfs", rig.image)
    assert r.returncode == 1 and "traxfs filesystem or engine; use --force" in r.stderr, r.stderr
    assert sha256(rig.image) == before


def test_mkfs_never_ignores_size(rig: Rig) -> None:
    """--size over a larger existing image is refused (mkfs does not shrink); a grown image goes
    back to its size when mkfs is refused after growing it."""
    with open(rig.image, "wb") as f:
        f.truncate(2 * SIZE)
    r = rig.run("mkfs", rig.image, "--size", str(SIZE), "--force")
    assert r.returncode == 1 and "does not shrink" in r.stderr, r.stderr
    assert rig.image.stat().st_size == 2 * SIZE
    r = rig.run("mkfs", rig.image, "--size", str(4 * SIZE), "--force", "--label", "L" * 33)
    assert r.returncode == 1 and "longer than 32 bytes" in r.stderr, r.stderr
    assert rig.image.stat().st_size == 2 * SIZE
    doc = json.loads(rig.ok("--json", "mkfs", rig.image, "--size", str(4 * SIZE), "--force").stdout)
    assert doc["size"] == rig.image.stat().st_size == 4 * SIZE


def test_refused_mkfs_with_size_leaves_the_image_alone(rig: Rig) -> None:
    rig.mkfs()
    before = sha256(rig.image)
    r = rig.run("mkfs", rig.image, "--size", str(2 * SIZE))
    assert r.returncode == 1 and "--force" in r.stderr, r.stderr
    expect(rig.image.stat().st_size == SIZE and sha256(rig.image) == before,
            f"refused mkfs changed the image (now {rig.image.stat().st_size} bytes)")


MKFS_BAD = [
    (["mkfs", "{tmp}/x.img", "--size", "64M", "--label", "L" * 33], 1, "longer than 32 bytes"),
    (["mkfs", "{tmp}/x.img", "--size", "64M", "--log-size", "1G"], 1, "too small for a 1073741824-byte log"),
    (["mkfs", "{tmp}/missing.img"], 1, "no such device or image file"),
    (["mkfs", "{tmp}/no/such/dir.img", "--size", "64M"], 1, "cannot open image file"),
    (["mkfs", "{tmp}/tiny.img", "--size", "1M"], 1, "too small"),
    (["mkfs", "{tmp}/x.img", "--size", "12Q"], 2, "invalid size"),
    (["mount", "{tmp}/missing.img", "{tmp}"], 1, "no such device or image file"),
    (["fsck", "{tmp}/missing.img"], 8, "no such device or image file"),
    (["fsck", "novg/nolv"], 8, "novg"),
]


@pytest.mark.parametrize(("args", "code", "message"), MKFS_BAD, ids=[" ".join(a)[:40] for a, _, _ in MKFS_BAD])
def test_bad_targets_are_refused_with_a_message(rig: Rig, args: list[str], code: int, message: str) -> None:
    args = [a.format(tmp=rig.tmp) for a in args]
    r = rig.run(*args)
    assert r.returncode == code, (r.stdout, r.stderr)
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert f"{args[1]}: {args[1]}:" not in r.stderr, f"the path is said twice: {r.stderr}"
    assert not os.path.ismount(rig.tmp)


# ----- mount points and a filesystem in use ----------------------------------------------------
def test_mountpoint_must_be_an_unmounted_directory(rig: Rig) -> None:
    rig.mkfs()
    before = sha256(rig.image)
    (rig.tmp / "file").write_text("")
    for target, why in ((rig.tmp / "file", "is not a directory"), (rig.tmp / "nonexistent", "does not exist")):
        r = rig.run("mount", rig.image, target)
        assert r.returncode == 1 and f"{target}: mount point {why}" in r.stderr, r.stderr
    mp = rig.mountpoint()
    r = rig.run("umount", mp)
    assert r.returncode == 1 and f"{mp}: not mounted" in r.stderr, r.stderr
    r = rig.run("umount", rig.tmp / "nonexistent")
    assert r.returncode == 1 and "not mounted" in r.stderr, r.stderr
    assert sha256(rig.image) == before
    assert not os.path.ismount(mp)


def test_a_mounted_filesystem_is_in_use(rig: Rig) -> None:
    rig.mkfs()
    other = rig.tmp / "other.img"
    rig.mkfs(other)
    other_sha = sha256(other)
    mp, mp2 = rig.mountpoint(), rig.mountpoint("mnt2")
    pid = rig.mount(mp)
    (mp / "data").write_bytes(b"still here")

    r = rig.run("mount", other, mp)  # something is mounted there already
    assert r.returncode == 1 and "already mounted" in r.stderr, r.stderr
    assert sha256(other) == other_sha
    r = rig.run("mount", rig.image, mp2)  # the same image a second time
    assert r.returncode == 1 and "in use" in r.stderr and str(rig.image) in r.stderr, r.stderr
    assert not os.path.ismount(mp2)
    r = rig.run("fsck", rig.image)
    assert r.returncode == 8 and "in use" in r.stderr, (r.stdout, r.stderr)
    r = rig.run("fsck", rig.image, "--repair")
    assert r.returncode == 8 and "in use" in r.stderr, (r.stdout, r.stderr)
    r = rig.run("mkfs", rig.image, "--force")
    assert r.returncode == 1 and "in use" in r.stderr, r.stderr

    assert (mp / "data").read_bytes() == b"still here"  # the live mount never noticed
    rig.ok("umount", mp)
    assert not alive(pid)
    assert rig.run("fsck", rig.image).returncode == 0


# ----- how a mount ends ------------------------------------------------------------------------
UMOUNT_CASES = [
    pytest.param("default-pidfile", id="default-pidfile"),
    pytest.param("own-pidfile", id="own-pidfile"),
    pytest.param("other-home", id="other-home"),  # TRAX_HOME differs: no pidfile to go by
]


@pytest.mark.parametrize("case", UMOUNT_CASES)
def test_umount_waits_for_the_server_to_exit(rig: Rig, case: str) -> None:
    """A fusermount3 wrapper stops the server (SIGSTOP), then unmounts: a umount that waits for
    the server must time out (exit 1, naming the PID); one that does not wait returns 0. (Stopped
    first: stopped after, a server that closes quickly could exit before a late-running wrapper
    stopped it. The kernel unmounts without the server.)"""
    rig.mkfs()
    mp = rig.mountpoint()
    pid = rig.mount(mp, *(["--pidfile", str(rig.tmp / "server.pid")] if case == "own-pidfile" else []))
    (mp / "f").write_bytes(os.urandom(MiB))
    bindir = rig.tmp / "bin"
    bindir.mkdir()
    wrapper = bindir / "fusermount3"
    wrapper.write_text(f'#!/bin/sh\nkill -STOP {pid}\nexec "{FUSERMOUNT}" "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    home = rig.tmp / "other-home" if case == "other-home" else rig.home
    try:
        r = subprocess.run([sys.executable, "-m", "traxfs.tools.cli", "--home", str(home), "umount", str(mp),
                            "--timeout", "1"], capture_output=True, text=True, timeout=60, env=env)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert not os.path.ismount(mp)
    assert wait_gone(pid), "the server did not finish after SIGCONT"
    assert "Traceback" not in r.stderr
    expect(r.returncode == 1 and f"server (pid {pid}) has not finished closing" in r.stderr,
            f"umount did not wait for the server: rc {r.returncode}, {r.stdout!r} {r.stderr!r}")
    assert rig.run("fsck", rig.image).returncode == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_to_the_foreground_server_unmounts_cleanly(rig: Rig, sig: int) -> None:
    rig.mkfs()
    mp = rig.mountpoint()
    pidfile = rig.tmp / "server.pid"
    with open(rig.tmp / "server.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "traxfs.tools.cli", "--home", str(rig.home), "mount",
                                 "--foreground", str(rig.image), str(mp), "--pidfile", str(pidfile)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    rig.pids.add(proc.pid)
    try:
        deadline = time.monotonic() + 30
        while not (pidfile.exists() and os.path.ismount(mp)):
            assert proc.poll() is None, (rig.tmp / "server.log").read_text()
            assert time.monotonic() < deadline, "mount not live after 30 s"
            time.sleep(0.02)
        assert int(pidfile.read_text()) == proc.pid
        payload = os.urandom(2 * MiB)
        (mp / "before-signal").write_bytes(payload)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0, (rig.tmp / "server.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not os.path.ismount(mp)
    assert not pidfile.exists()
    assert "closed cleanly" in (rig.tmp / "server.log").read_text()
    r = rig.run("fsck", rig.image)
    assert r.returncode == 0, (r.stdout, r.stderr)
    dev, fs = in_process(rig.image)
    try:
        node = fs.lookup(ROOT_INO, b"before-signal")
        assert fs.read(node.ino, 0, node.size) == payload
    finally:
        fs.close()
        dev.close()


# ----- fsck finds and repairs ------------------------------------------------------------------
def test_fsck_reports_then_repairs_logical_damage(rig: Rig) -> None:
    rig.mkfs()
    dev, fs = in_process(rig.image)
    a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).ino
    fs.write(a, 0, b"A" * 5000)
    d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).ino
    fs.create(d, b"b", 0o644, 0, 0)
    c = fs.create(d, b"c", 0o600, 0, 0).ino
    fs.write(c, 0, b"lost but kept")
    fs.repair.set_nlink(a, 7)  # deliberate damage: 1. a wrong link count
    with fs.repair.transaction() as ftx:
        tx = ftx.tx
        raw = fs.t["dirents"].get(dirent_key(d, b"b"))  # 2. an entry without its readdir cookie
        fs.t["cookies"].delete(tx, cookie_key(d, U64.unpack(raw[8:16])[0]))
        raw = fs.t["dirents"].get(dirent_key(d, b"c"))  # 3. an inode no entry names
        fs.t["dirents"].delete(tx, dirent_key(d, b"c"))
        fs.t["cookies"].delete(tx, cookie_key(d, U64.unpack(raw[8:16])[0]))
    fs.close()
    dev.close()

    r = rig.run("fsck", rig.image)
    assert r.returncode == 4, (r.stdout, r.stderr)
    assert f"PROBLEM: inode {a}: link count 7, counted 1" in r.stdout, r.stdout
    assert f"PROBLEM: entry b'b' in directory {d} has no readdir cookie" in r.stdout, r.stdout
    assert f"PROBLEM: inode {c} (-rw-------) is named by no entry (lost)" in r.stdout, r.stdout
    assert r.stdout.strip().endswith("errors left uncorrected")
    r = rig.run("--json", "fsck", rig.image)
    assert r.returncode == 4, r.stderr
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 4 and len(doc["problems"]) == 3 and doc["repaired"] == [], doc

    r = rig.run("fsck", rig.image, "--repair")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stdout.count("repaired: ") == 3 and "PROBLEM" not in r.stdout, r.stdout
    assert r.stdout.strip().endswith("errors corrected")
    r = rig.run("fsck", rig.image)
    assert r.returncode == 0, (r.stdout, r.stderr)

    dev, fs = in_process(rig.image)
    try:
        assert fs.getattr(a).nlink == 1
        assert [name for name, _, _ in fs.readdir(d, 0)] == [b"b"]
        lost = fs.lookup(fs.lookup(ROOT_INO, b"lost+found").ino, f"#{c}".encode())
        assert lost.ino == c and stat.S_IMODE(lost.mode) == 0o600
        assert fs.read(c, 0, 100) == b"lost but kept"
    finally:
        fs.close()
        dev.close()


def test_fsck_gives_a_lost_root_directory_back(rig: Rig) -> None:
    """The root's inode record gone: fsck reports it, --repair puts an empty root directory in
    its place (``fs.repair.new_root``), and what the root named is found again."""
    rig.mkfs()
    dev, fs = in_process(rig.image)
    f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).ino
    with fs.repair.transaction() as ftx:  # deliberate damage
        fs.t["inodes"].delete(ftx.tx, ino_key(ROOT_INO))
    fs.close()
    dev.close()
    r = rig.run("fsck", rig.image)
    assert r.returncode == 4 and "PROBLEM: the root directory is missing" in r.stdout, (r.stdout, r.stderr)
    for _ in range(3):  # the root first; what it held is checked once it exists
        r = rig.run("fsck", rig.image, "--repair")
        assert r.returncode in (0, 1), (r.stdout, r.stderr)
        if r.returncode == 0:
            break
    assert r.returncode == 0, (r.stdout, r.stderr)
    dev, fs = in_process(rig.image)
    try:
        root = fs.getattr(ROOT_INO)
        assert stat.S_ISDIR(root.mode) and fs.lookup(ROOT_INO, b"f").ino == f
        assert root.nlink == 2  # no directory of the tree (/queues and /tables are subtrees)
    finally:
        fs.close()
        dev.close()


def test_fsck_without_repair_writes_nothing_even_after_a_crash(rig: Rig) -> None:
    rig.mkfs()
    mp = rig.mountpoint()
    pid = rig.mount(mp)
    (mp / "f").write_bytes(b"x" * 100_000)
    os.kill(pid, signal.SIGKILL)  # a crash: the next open must run recovery
    assert wait_gone(pid)
    subprocess.run(["fusermount3", "-uz", str(mp)], capture_output=True)
    before = sha256(rig.image)
    r = rig.run("fsck", rig.image)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sha256(rig.image) == before  # recovery and the check ran on a memory overlay
    assert rig.run("fsck", rig.image, "--repair").returncode in (0, 1)
    assert rig.run("fsck", rig.image).returncode == 0


def test_mount_of_another_tools_image_is_refused_and_changes_nothing(rig: Rig) -> None:
    """An ext4 image is not a traxfs filesystem: mount says so, mounts nothing, writes nothing."""
    from signatures import ext4

    other = str(rig.tmp / "ext4.img")
    ext4(other, 8 << 20)
    before = sha256(other)
    mp = rig.tmp / "mnt-ext4"
    mp.mkdir()
    r = rig.run("mount", other, mp)
    assert r.returncode == 1 and "no traxfs engine superblock" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not os.path.ismount(mp)
    assert sha256(other) == before

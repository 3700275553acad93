"""Mounting as Linux users do (issue 19): ``-o ro`` (writes EROFS, not one byte written to the
image, not even after an unclean stop whose recovery runs), the ``mount.fuse.traxfs`` /
``umount.fuse.traxfs`` helpers with mount(8)'s cleared environment, and ``mount``/``umount``
from an fstab line.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from fsmount import Mount, is_mounted, trax

pytestmark = pytest.mark.timeout(180)

BIN = Path(sys.executable).parent
HELPERS = ("mount.fuse.traxfs", "umount.fuse.traxfs")


def _sha(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _holders(image: Path) -> list[int]:
    """PIDs with ``image`` open (the server, until it has closed the filesystem)."""
    out = []
    target = os.path.realpath(image)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    out.append(int(pid))
                    break
            except OSError:
                continue
    return out


@pytest.fixture
def rig(tmp_path):
    """An image with a file in it, a mount point other users can reach, and a home."""
    top = Path(tempfile.mkdtemp(prefix="traxfs-ro-", dir="/tmp"))
    os.chmod(top, 0o755)
    mp = top / "mnt"
    mp.mkdir()
    home = tmp_path / "home"
    image = tmp_path / "fs.img"
    trax("mkfs", str(image), "--size", "256M", home=home)
    m = Mount(image, home, mp, tmp_path / "rw.log", ())
    m.start()
    try:
        (mp / "kept").write_bytes(b"written before\n")
        m.stop()
    finally:
        m.kill()
    try:
        yield image, home, mp, tmp_path
    finally:
        if is_mounted(mp):
            subprocess.run(["fusermount3", "-uz", str(mp)], capture_output=True)
        shutil.rmtree(top, ignore_errors=True)


def _refused_writes(mp: Path) -> None:
    for what, fn in (("create", lambda: (mp / "new").write_bytes(b"x")),
                     ("open for writing", lambda: open(mp / "kept", "r+b").close()),
                     ("mkdir", lambda: os.mkdir(mp / "d")),
                     ("unlink", lambda: os.unlink(mp / "kept")),
                     ("chmod", lambda: os.chmod(mp / "kept", 0o600)),
                     ("setxattr", lambda: os.setxattr(mp / "kept", "user.a", b"1"))):
        with pytest.raises(OSError) as e:
            fn()
        assert e.value.errno == errno.EROFS, what
    assert (mp / "kept").read_bytes() == b"written before\n"


def test_a_read_only_mount_writes_nothing(rig):
    image, home, mp, tmp = rig
    before = _sha(image)
    m = Mount(image, home, mp, tmp / "ro.log", ("-o", "ro"))
    m.start()
    try:
        _refused_writes(mp)
        assert json.loads((mp / ".trax" / "volume.json").read_text())["read_only"] is True
        assert "ro" in next(line for line in Path("/proc/self/mounts").read_text().splitlines()
                            if f" {mp} " in line).split()[3].split(",")
        m.stop()
    finally:
        m.kill()
    assert _sha(image) == before


def test_a_read_only_mount_after_a_crash_recovers_in_memory_only(rig):
    image, home, mp, tmp = rig
    m = Mount(image, home, mp, tmp / "crash.log", ("--commit-interval", "0.05"))
    m.start()
    try:
        (mp / "late").write_bytes(b"after the first mount\n")
        os.sync()
        fd = os.open(mp / "late", os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    finally:
        m.kill()  # SIGKILL: the next open must recover from the log
    before = _sha(image)
    ro = Mount(image, home, mp, tmp / "ro.log", ("-o", "ro"))
    ro.start()
    try:
        assert (mp / "late").read_bytes() == b"after the first mount\n"
        _refused_writes(mp)
        ro.stop()
    finally:
        ro.kill()
    assert _sha(image) == before  # recovery ran on the overlay: the log and pages untouched
    assert trax("fsck", str(image), home=home, check=False).returncode == 0


def test_unknown_mount_options_are_refused(rig):
    image, home, mp, _ = rig
    r = trax("mount", str(image), str(mp), "-o", "ro,bogus", home=home, check=False)
    assert r.returncode != 0 and "unknown mount option 'bogus'" in r.stderr, r.stderr
    assert not is_mounted(mp)


def test_the_helpers_work_with_mount_8s_cleared_environment(rig):
    image, home, mp, _ = rig
    before = _sha(image)
    r = subprocess.run(["env", "-i", str(BIN / "mount.fuse.traxfs"), str(image), str(mp), "-n", "-o",
                        f"ro,allow_other,noauto,home={home}"], capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    try:
        assert is_mounted(mp) and (mp / "kept").read_bytes() == b"written before\n"
        _refused_writes(mp)
        assert _holders(image)
    finally:
        r = subprocess.run(["env", "-i", str(BIN / "umount.fuse.traxfs"), str(mp)], capture_output=True, text=True,
                           timeout=90)
    assert r.returncode == 0, r.stderr
    assert not is_mounted(mp) and _holders(image) == []  # closed when umount returned
    assert _sha(image) == before


@pytest.fixture
def sbin_helpers():
    """The helpers linked into /sbin, where mount(8) looks (removed afterwards; root only)."""
    if os.geteuid() != 0:
        pytest.skip("installing mount helpers into /sbin needs root")
    made = []
    for name in HELPERS:
        link = Path("/sbin") / name
        if link.exists() or link.is_symlink():
            if os.path.realpath(link) != os.path.realpath(BIN / name):
                pytest.skip(f"{link} exists and is not this checkout's helper")
            continue
        link.symlink_to(BIN / name)
        made.append(link)
    try:
        yield
    finally:
        for link in made:
            link.unlink()


def test_mount_and_umount_from_an_fstab_line(rig, sbin_helpers):
    image, home, mp, tmp = rig
    fstab = tmp / "fstab"
    # helper=fuse.traxfs: umount(8) (util-linux 2.38) looks for umount.fuse, not umount.fuse.traxfs,
    # unless the mount's userspace options name the helper
    fstab.write_text(f"{image} {mp} fuse.traxfs ro,allow_other,noauto,helper=fuse.traxfs,home={home} 0 0\n")
    before = _sha(image)
    r = subprocess.run(["mount", "-T", str(fstab), str(mp)], capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    try:
        assert (mp / "kept").read_bytes() == b"written before\n"
        _refused_writes(mp)
    finally:
        r = subprocess.run(["umount", str(mp)], capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    assert not is_mounted(mp) and _holders(image) == []  # umount(8) ran the helper, which waited
    assert _sha(image) == before
    # and mount -t with the source on the command line, read-write this time
    r = subprocess.run(["mount", "-t", "fuse.traxfs", str(image), str(mp), "-o", f"helper=fuse.traxfs,home={home}"],
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    try:
        (mp / "new").write_bytes(b"rw\n")
    finally:
        subprocess.run(["umount", str(mp)], capture_output=True, timeout=90)
    assert _holders(image) == [] and _sha(image) != before


def test_dev_and_suid_when_root_asks(rig):
    image, home, mp, tmp = rig
    if os.geteuid() != 0:
        pytest.skip("only root may ask for dev and suid")

    def flags() -> list[str]:
        return next(line for line in Path("/proc/self/mounts").read_text().splitlines()
                    if f" {mp} " in line).split()[3].split(",")

    m = Mount(image, home, mp, tmp / "plain.log", ())
    m.start()
    try:
        assert {"nosuid", "nodev"} <= set(flags())  # libfuse's default
        m.stop()
    finally:
        m.kill()
    m = Mount(image, home, mp, tmp / "devsuid.log", ("-o", "dev,suid"))
    m.start()
    try:
        assert not {"nosuid", "nodev"} & set(flags())
        m.stop()
    finally:
        m.kill()

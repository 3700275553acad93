"""Damaged, truncated and grown filesystems, as a user meets them: `trax mount`, `trax fsck`
and `trax resize` in real processes on image files.

What is promised (man/trax-fsck.8, trax-mount.8, trax-resize.8):

* a device shorter than its filesystem (a truncated image) is refused by mount and fsck with a
  message that says so and how to restore it; nothing is written to it;
* fsck never prints a traceback: a page that fails verification is reported with its tree,
  everything readable around it is salvaged, and ``--repair`` rebuilds the tree, reattaching
  what lost its name to /lost+found; exit codes are e2fsck's;
* a mount of a filesystem known to be damaged is refused, pointing at fsck;
* ``trax resize`` grows an unmounted filesystem to its device's new size.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from fsmount import Mount, is_mounted, trax

pytestmark = pytest.mark.timeout(120)

MiB = 1 << 20
if shutil.which("fusermount3") is None or not os.path.exists("/dev/fuse"):
    pytest.skip("FUSE (fusermount3, /dev/fuse) is not available", allow_module_level=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(4 * MiB), b""):
            h.update(block)
    return h.hexdigest()


class Box:
    """An image, a trax home and a mount point under ``tmp_path``; teardown stops any mount."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.home = tmp_path / "home"
        self.image = tmp_path / "fs.img"
        self.mp = tmp_path / "mnt"
        self.mp.mkdir()
        self.mount_: Mount | None = None

    def run(self, *args: object) -> subprocess.CompletedProcess:
        return trax(*map(str, args), home=self.home, check=False, timeout=120)

    def ok(self, *args: object) -> subprocess.CompletedProcess:
        r = self.run(*args)
        assert r.returncode == 0, (args, r.stdout, r.stderr)
        return r

    def mount(self, *extra: str) -> Mount:
        self.mount_ = Mount(self.image, self.home, self.mp, self.tmp / "mount.log", extra)
        self.mount_.start()
        return self.mount_

    def umount(self) -> None:
        if self.mount_ is not None:
            self.mount_.stop()
            self.mount_ = None


@pytest.fixture
def box(tmp_path: Path):
    b = Box(tmp_path)
    try:
        yield b
    finally:
        if b.mount_ is not None:
            b.mount_.kill()
        if is_mounted(b.mp):  # a daemon mount a failing test made (its server exits on unmount)
            subprocess.run(["fusermount3", "-u", str(b.mp)], capture_output=True)
        if is_mounted(b.mp):
            subprocess.run(["fusermount3", "-uz", str(b.mp)], capture_output=True)


# ----- a truncated image (issue 12, item 11) -----------------------------------------------------
def test_a_truncated_image_is_refused_and_left_alone(box: Box) -> None:
    box.ok("mkfs", box.image, "--size", "128M")
    box.mount()
    first = os.urandom(3 * MiB)
    (box.mp / "first").write_bytes(first)
    for i in range(5):  # data up to the end of the device, so the cut takes some
        (box.mp / f"big{i}").write_bytes(os.urandom(18 * MiB))
    box.umount()

    os.truncate(box.image, 64 * MiB)
    before = sha256(box.image)
    r = box.run("mount", box.image, box.mp, "--log", box.tmp / "refused.log")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "is 64 MiB but its filesystem needs 128 MiB" in r.stderr and "truncated" in r.stderr, r.stderr
    assert f"truncate -s {128 * MiB} {box.image}" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not os.path.ismount(box.mp)
    r = box.run("fsck", box.image, "--repair")
    assert r.returncode == 8 and "is 64 MiB but its filesystem needs 128 MiB" in r.stderr, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert sha256(box.image) == before and os.path.getsize(box.image) == 64 * MiB  # nothing written

    os.truncate(box.image, 128 * MiB)  # restored: what lay past the cut reads as zeros now
    box.mount()
    assert (box.mp / "first").read_bytes() == first
    box.umount()
    r = box.run("fsck", box.image)
    assert r.returncode == 0, (r.stdout, r.stderr)

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

import errno
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from fsmount import Mount
from test_fs_tools import Rig, sha256

from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.page import PAGE_SIZE, PageType
from traxfs.fs.engine.resize import new_page_count, write_new_maps
from traxfs.fs.engine.superblock import COPIES, read_superblock, write_superblock
from traxfs.fs.filesystem import ROOT_INO, FileSystem
from traxfs.fs.fsck import check_device
from traxfs.fs.keys import dirent_key
from traxfs.fs.struct.btree import BTree
from traxfs.fs.struct.btree_salvage import salvage
from traxfs.volume.device import ImageFileDevice

pytestmark = pytest.mark.timeout(120)

MiB = 1 << 20
if shutil.which("fusermount3") is None or not os.path.exists("/dev/fuse"):
    pytest.skip("FUSE (fusermount3, /dev/fuse) is not available", allow_module_level=True)


class Box(Rig):
    """The CLI rig of test_fs_tools, plus a foreground mount of its image at one mount point
    (teardown stops it, and any daemon mount a failing test left there)."""

    def __init__(self, tmp_path: Path):
        super().__init__(tmp_path)
        self.mp = self.mountpoint()
        self.mount_: Mount | None = None

    def mount(self, *extra: str) -> Mount:  # type: ignore[override]  (foreground, not the daemon)
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
        b.cleanup()  # a daemon mount a failing test made there (its server exits on unmount)


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

    os.truncate(box.image, 128 * MiB)  # restored: what lay past the cut is zeros now
    box.mount()
    assert (box.mp / "first").read_bytes() == first
    box.umount()
    # the zeros past the cut are damage (pages of the checksum tree, data failing its checksums):
    # fsck names it, never calls it clean
    r = box.run("fsck", box.image)
    assert r.returncode == 4 and "PROBLEM" in r.stdout, (r.stdout, r.stderr)


# ----- damaged metadata (issue 12, item 5) -------------------------------------------------------
FILES = 300


def _content(i: int) -> bytes:
    return f"file {i} ".encode() * (1 + i % 7)


def build(image: Path) -> None:
    """A filesystem with /d holding FILES small files (enough for several leaves per tree)."""
    dev = ImageFileDevice(str(image), 64 * MiB, create=True)
    FileSystem.mkfs(dev)
    dev.close()
    dev = ImageFileDevice(str(image))
    fs = FileSystem.open(dev, where=str(image))
    d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).ino
    for i in range(FILES):
        fs.write(fs.create(d, f"f{i:03d}".encode(), 0o644, 0, 0).ino, 0, _content(i))
    fs.close()
    dev.close()


def damage(image: Path, tree: str, role: str) -> int:
    """Flip a byte in a page of ``tree``: its header, its root, or a leaf in the middle (not
    the first: the salvage walks around it). Returns the page number."""
    dev = ImageFileDevice(str(image))
    eng = Engine.open(dev, name=str(image))
    try:
        header = eng.get_root(f"btree:fs.{tree}")
        s = salvage(eng, header)
        root = BTree(eng, header)._root()  # noqa: SLF001 - the test picks the page to damage
        leaves = []
        for pid in sorted(s.pages):
            with eng.page(pid) as f:
                if f.data[3] == PageType.BTREE_LEAF:
                    leaves.append(pid)
        victim = {"header": header, "root": root, "leaf": leaves[len(leaves) // 2]}[role]
        where = eng.sb.pages_offset + victim * PAGE_SIZE + 333
    finally:
        eng.close()
        dev.close()
    flip(image, where)
    return victim


def flip(image: Path, offset: int) -> None:
    with open(image, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


def names_and_data(root: Path) -> dict[str, bytes]:
    out = {}
    for sub in ("d", "lost+found"):
        if (root / sub).is_dir():
            for p in (root / sub).iterdir():
                out[f"{sub}/{p.name}"] = p.read_bytes()
    return out


def test_fsck_salvages_a_damaged_directory_leaf_and_the_repair_reattaches_the_rest(box: Box) -> None:
    """The tester's case: a damaged dirents leaf. fsck reports it (no traceback, exit 4,
    nothing written); a mount meets it, answers EIO and marks the filesystem damaged, so the
    next mount is refused pointing at fsck; --repair rebuilds the tree and every file whose
    name was lost is in /lost+found with its data (exit 1); then all is clean."""
    build(box.image)
    page = damage(box.image, "dirents", "leaf")
    before = sha256(box.image)
    r = box.run("fsck", box.image)
    assert r.returncode == 4, (r.stdout, r.stderr)
    assert f"PROBLEM: page {page} of tree fs.dirents: checksum mismatch" in r.stdout, r.stdout
    assert "could not be read" in r.stdout and "is named by no entry (lost)" in r.stdout, r.stdout
    assert r.stdout.strip().endswith("errors left uncorrected"), r.stdout
    assert f"run 'trax fsck --repair {box.image}'" in r.stderr, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert sha256(box.image) == before

    box.mount()  # the damage is off the path to the roots: found when it is read
    with pytest.raises(OSError) as e:
        os.listdir(box.mp / "d")
    assert e.value.errno == errno.EIO
    box.umount()
    r = box.run("mount", box.image, box.mp, "--log", box.tmp / "refused.log")
    assert r.returncode == 1 and not os.path.ismount(box.mp), (r.stdout, r.stderr)
    assert f"filesystem on {box.image} is damaged (1 damaged page(s) met while it was in use, the first page " \
           f"{page}); run 'trax fsck --repair {box.image}'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr

    r = box.run("fsck", box.image, "--repair")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"repaired: page {page} of tree fs.dirents" in r.stdout and "tree fs.dirents rebuilt" in r.stdout
    assert "repaired: damage mark cleared" in r.stdout and "PROBLEM" not in r.stdout, r.stdout
    assert r.stdout.strip().endswith("errors corrected")
    r = box.run("fsck", box.image)
    assert r.returncode == 0, (r.stdout, r.stderr)

    box.mount()
    found = names_and_data(box.mp)
    box.umount()
    lost = [n for n in found if n.startswith("lost+found/")]
    assert lost and len(found) == FILES, (len(lost), len(found))
    assert sorted(found.values()) == sorted(_content(i) for i in range(FILES))  # every file, whole
    assert all(found[f"d/f{i:03d}"] == _content(i) for i in range(FILES) if f"d/f{i:03d}" in found)


@pytest.mark.parametrize("role", ["root", "header"])
def test_a_tree_whose_root_or_header_is_damaged_loses_nothing(box: Box, role: str) -> None:
    """Below a damaged root (or header: the root pointer) the leaves are intact: fsck finds
    them among the leaf pages no tree reaches and rebuilds the tree from them."""
    build(box.image)
    page = damage(box.image, "dirents", role)
    r = box.run("fsck", box.image)
    assert r.returncode == 4 and f"page {page} of tree fs.dirents" in r.stdout, (r.stdout, r.stderr)
    assert "found in leaves it no longer reaches" in r.stdout and "could not be read" not in r.stdout, r.stdout
    r = box.run("mount", box.image, box.mp, "--log", box.tmp / "refused.log")  # a root: found at once
    assert r.returncode == 1 and f"filesystem on {box.image} is damaged (page {page}: " in r.stderr, r.stderr
    r = box.run("fsck", box.image, "--repair")
    assert r.returncode == 1 and "PROBLEM" not in r.stdout, (r.stdout, r.stderr)
    assert box.run("fsck", box.image).returncode == 0
    box.mount()
    assert names_and_data(box.mp) == {f"d/f{i:03d}": _content(i) for i in range(FILES)}
    box.umount()


@pytest.mark.parametrize(("tree", "role", "says"), [
    ("inodes", "leaf", "inode"),
    ("extents", "leaf", "file page"),
    ("cookies", "leaf", "readdir cookie"),
    ("meta", "root", "(all of them)"),
    ("orphans", "root", "(all of them)"),
])
def test_every_tree_damaged_is_reported_and_repaired(tmp_path: Path, tree: str, role: str, says: str) -> None:
    image = tmp_path / "fs.img"
    build(image)
    page = damage(image, tree, role)
    with ImageFileDevice(str(image)) as dev:
        rep = check_device(dev, repair=False, where=str(image))
        assert rep.exit_code == 4, rep.as_dict()
        first = rep.problems[0]
        assert first.startswith(f"page {page} of tree fs.{tree}: checksum mismatch") and says in first, first
        rep = check_device(dev, repair=True, where=str(image))
        assert rep.exit_code == 1 and not rep.problems, rep.as_dict()
        assert any(f"tree fs.{tree} rebuilt" in t for t in rep.repaired), rep.repaired
        rep = check_device(dev, repair=False, where=str(image))
        assert rep.exit_code == 0, rep.as_dict()
    fs = FileSystem.open(ImageFileDevice(str(image)), where=str(image))
    try:  # what survived is usable: a new file in the repaired filesystem
        ino = fs.create(ROOT_INO, b"after", 0o644, 0, 0).ino
        fs.write(ino, 0, b"new")
        assert fs.read(ino, 0, 3) == b"new"
    finally:
        fs.close()


def test_a_damaged_allocation_map_is_rebuilt(box: Box) -> None:
    build(box.image)
    flip(box.image, _pages_offset(box.image) + 1 * PAGE_SIZE + 100)  # map page 1
    r = box.run("mount", box.image, box.mp, "--log", box.tmp / "refused.log")
    assert r.returncode == 1 and f"filesystem on {box.image} is damaged (page 1: checksum mismatch" in r.stderr
    r = box.run("fsck", box.image)
    assert r.returncode == 4 and "allocation map page 1: checksum mismatch" in r.stdout, (r.stdout, r.stderr)
    r = box.run("fsck", box.image, "--repair")
    assert r.returncode == 1 and "allocation map page(s) rebuilt" in r.stdout, (r.stdout, r.stderr)
    assert box.run("fsck", box.image).returncode == 0
    box.mount()
    assert names_and_data(box.mp) == {f"d/f{i:03d}": _content(i) for i in range(FILES)}
    (box.mp / "more").write_bytes(b"m" * 100_000)  # allocation works, and takes nothing owned
    box.umount()
    assert box.run("fsck", box.image).returncode == 0


def _pages_offset(image: Path) -> int:
    with ImageFileDevice(str(image)) as dev:
        return read_superblock(dev, str(image)).pages_offset


@pytest.mark.parametrize("copy", [0, 1])
def test_a_damaged_superblock_copy_is_reported_and_rewritten(box: Box, copy: int) -> None:
    build(box.image)
    flip(box.image, COPIES[copy] + 40)
    before = sha256(box.image)
    r = box.run("fsck", box.image)
    assert r.returncode == 4, (r.stdout, r.stderr)
    assert f"PROBLEM: {box.image} superblock copy {copy}: superblock checksum mismatch" in r.stdout, r.stdout
    assert sha256(box.image) == before
    r = box.run("fsck", box.image, "--repair")
    assert r.returncode == 1 and f"superblock copy {copy}" in r.stdout and "(rewritten)" in r.stdout, r.stdout
    assert box.run("fsck", box.image).returncode == 0


def test_a_damaged_catalog_is_an_operational_error(box: Box) -> None:
    build(box.image)
    flip(box.image, _pages_offset(box.image) + 200)  # page 0: the catalog of trees
    r = box.run("fsck", box.image, "--repair")
    assert r.returncode == 8, (r.stdout, r.stderr)
    assert "page 0: checksum mismatch" in r.stderr and "fsck cannot check it" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = box.run("mount", box.image, box.mp, "--log", box.tmp / "refused.log")
    assert r.returncode == 1 and f"filesystem on {box.image} is damaged (page 0: " in r.stderr, r.stderr


def test_fsck_partial_checks_a_degraded_mirror(box: Box) -> None:
    disks = [box.tmp / f"d{i}.img" for i in range(2)]
    box.ok("pv", "create", *disks, "--size", "64M")
    box.ok("vg", "create", "vg0", *disks)
    box.ok("lv", "create", "vg0/m", "--size", "32M", "--mirror")
    box.ok("mkfs", "vg0/m")
    os.remove(disks[1])
    r = box.run("fsck", "vg0/m")
    assert r.returncode == 8 and str(disks[1]) in r.stderr and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    r = box.run("fsck", "vg0/m", "--partial")
    assert r.returncode == 0 and r.stdout.strip().endswith("clean"), (r.stdout, r.stderr)


# ----- growing (trax resize) ---------------------------------------------------------------------
def _df(mp: Path) -> tuple[int, int]:
    st = os.statvfs(mp)
    return st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize


def test_resize_grows_an_image_to_its_new_size(box: Box) -> None:
    """64 MiB grown to 256 MiB: past the range of the first allocation map, so a new map is
    placed in the new space; a file larger than the old filesystem then fits."""
    box.ok("mkfs", box.image, "--size", "64M")
    box.mount()
    old = os.urandom(30 * MiB)
    (box.mp / "old").write_bytes(old)
    total0, _ = _df(box.mp)
    box.umount()

    os.truncate(box.image, 256 * MiB)
    before = sha256(box.image)
    r = box.run("resize", box.image, "--size", "32M")
    assert r.returncode == 1 and "can grow, not shrink" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = box.run("resize", box.image, "--size", "1G")
    assert r.returncode == 1 and "the device holds only 256 MiB" in r.stderr, r.stderr
    assert sha256(box.image) == before  # refused: nothing written
    r = box.run("resize", box.image)
    assert r.returncode == 0 and "filesystem grown from 64MiB to 256MiB" in r.stdout, (r.stdout, r.stderr)
    r = box.run("resize", box.image)
    assert r.returncode == 0 and "nothing to do" in r.stdout, (r.stdout, r.stderr)
    assert box.run("fsck", box.image).returncode == 0

    box.mount()
    total, free = _df(box.mp)
    assert total > total0 + 180 * MiB and free > 180 * MiB, (total0, total, free)
    big = os.urandom(MiB) * 100  # more than the whole filesystem held before
    (box.mp / "big").write_bytes(big)
    assert (box.mp / "old").read_bytes() == old and (box.mp / "big").read_bytes() == big
    box.umount()
    r = box.run("fsck", box.image)
    assert r.returncode == 0, (r.stdout, r.stderr)


def test_resize_after_lv_extend(box: Box) -> None:
    disks = [box.tmp / f"d{i}.img" for i in range(2)]
    box.ok("pv", "create", *disks, "--size", "96M")
    box.ok("vg", "create", "vg0", *disks)
    box.ok("lv", "create", "vg0/fs", "--size", "40M")
    box.ok("mkfs", "vg0/fs")
    box.ok("lv", "extend", "vg0/fs", "--size", "152M")
    r = box.run("resize", "vg0/fs")
    assert r.returncode == 0 and "filesystem grown from 40MiB to 152MiB" in r.stdout, (r.stdout, r.stderr)
    box.image = "vg0/fs"  # type: ignore[assignment]  (the box mounts what it is told)
    box.mount()
    data = os.urandom(MiB) * 60
    (box.mp / "f").write_bytes(data)
    assert (box.mp / "f").read_bytes() == data
    box.umount()
    assert box.run("fsck", "vg0/fs").returncode == 0


def test_a_grow_interrupted_leaves_the_old_or_the_new_size(tmp_path: Path) -> None:
    """The maps are written before the superblock names them: stopped there, the engine has its
    old size; stopped after the first superblock copy, its new one; fsck is clean either way."""
    image = tmp_path / "fs.img"
    build(image)
    os.truncate(image, 256 * MiB)
    with ImageFileDevice(str(image)) as dev:
        sb = read_superblock(dev, str(image))
        count = new_page_count(dev, sb, None, str(image))
        write_new_maps(dev, sb, count)  # ... and the superblock write never happens
        assert read_superblock(dev, str(image)).page_count == sb.page_count
        assert check_device(dev, repair=False, where=str(image)).exit_code == 0
        sb = read_superblock(dev, str(image))
        map_pages = write_new_maps(dev, sb, count)
        write_superblock(dev, replace(sb, page_count=count, map_pages=map_pages))  # one copy only
        assert read_superblock(dev, str(image)).page_count == count
        rep = check_device(dev, repair=False, where=str(image))
        assert rep.exit_code == 0, rep.as_dict()
    fs = FileSystem.open(ImageFileDevice(str(image)), where=str(image))
    try:
        assert fs.statfs().blocks == count
        ino = fs.create(ROOT_INO, b"big", 0o644, 0, 0).ino
        fs.write(ino, 0, b"z" * (100 * MiB))  # reaches the new map's range
    finally:
        fs.close()
    with ImageFileDevice(str(image)) as dev:
        assert check_device(dev, repair=False, where=str(image)).exit_code == 0


def test_damage_met_by_recovery_is_a_clear_refusal(box: Box) -> None:
    """A crash left a transaction to undo; the undo descends a tree whose root (not changed
    since it was last written, so not rebuilt by redo) is damaged."""
    build(box.image)
    dev = ImageFileDevice(str(box.image))
    fs = FileSystem.open(dev, where=str(box.image))
    key = dirent_key(fs.lookup(ROOT_INO, b"d").ino, b"f150")
    tx = fs.e.begin()  # a loser for recovery to undo: one leaf changed, no split
    fs.t["dirents"].put(tx, key, fs.t["dirents"].get(key)[:8] + bytes(8))
    fs.e.log.force(fs.e.log.reserved())
    page = fs.t["dirents"]._root()  # noqa: SLF001 - the page the undo descends through
    where = fs.e.sb.pages_offset + page * PAGE_SIZE + 333
    fs.crash()
    dev.close()
    flip(box.image, where)  # after the crash: no recovery has run yet
    r = box.run("mount", box.image, box.mp, "--log", box.tmp / "refused.log")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"filesystem on {box.image} is damaged (page {page}: checksum mismatch" in r.stderr, r.stderr
    r = box.run("fsck", box.image)
    assert r.returncode == 8 and f"page {page}: checksum mismatch" in r.stderr, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr

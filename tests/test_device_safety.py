"""No command writes a device without first identifying what is on it.

* identification: every signature of the built-in table is found (and libblkid, through
  ``wipefs``, agrees on the ones written byte for byte in ``signatures.py``), on an image file
  and inside a logical volume; an all-zero device is empty;
* the scenarios of the issue as reported (each passed before, rc 0 and the data gone): ``mkfs``
  of a physical volume of a group with a volume on it; ``pv create`` and ``vg create`` over a
  traxfs filesystem;
* the matrix: every writer — ``pv create``, ``vg create``, ``vg extend``, ``vg replace``,
  ``mkfs DEVICE``, ``mkfs VG/LV`` — on every state of a device — a traxfs filesystem, an unused
  physical volume, a physical volume of a group with a volume, ext4 (mkfs.ext4), an MBR and a
  GPT partition table, an LVM2 label, an empty image — without ``--force``: refused with exit 1,
  a message naming what is there and the device byte-identical (sha256); with ``--force``:
  done, and afterwards the device identifies as what was written and nothing else (the leftover
  foreign magic wiped, libblkid included) — except that a device of another group is never
  taken into a group;
* a new logical volume identifies as empty whatever its extents held before;
* messages: advice names commands that exist; ``vg list`` shows a degraded group.

The CLI runs in-process (``main([...])``); locks held by other processes are in test_in_use.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import signatures
from conftest import MiB

from traxfs.fs.engine.superblock import MAGIC
from traxfs.tools.cli import main
from traxfs.volume.device import ImageFileDevice
from traxfs.volume.group import READ, VolumeGroup
from traxfs.volume.registry import Registry
from traxfs.volume.signature import ENGINE_MAGIC, FS_KIND, PV_KIND, identify

pytestmark = pytest.mark.timeout(120)
SIZE = 32 * MiB
WIPEFS = shutil.which("wipefs", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def cli(capsys, home: Path, *args: object) -> tuple[int, str]:
    """Run ``trax`` in this process; (exit code, stderr)."""
    capsys.readouterr()
    rc = main(["--home", str(home), *map(str, args)])
    return rc, capsys.readouterr().err


def ok(capsys, home: Path, *args: object) -> None:
    rc, err = cli(capsys, home, *args)
    assert rc == 0, (args, err)


def sha(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * MiB):
            h.update(chunk)
    return h.hexdigest()


def kinds(path: str) -> set[str]:
    dev = ImageFileDevice(path)
    try:
        return {f.kind for f in identify(dev, path, path)}
    finally:
        dev.close()


# ----- identification ----------------------------------------------------------------------------
def _magic_at(offset: int, magic: bytes) -> Callable[[str, int], None]:
    def build(path: str, size: int) -> None:
        signatures.blank(path, size)
        signatures.write_at(path, offset, magic)
    return build


BUILT_IN = [
    ("ext4", signatures.ext4, "ext4 filesystem (label 'old')"),
    ("swap", signatures.swap, "swap space"),
    ("dos", signatures.mbr, "MBR (dos) partition table"),
    ("gpt", signatures.gpt, "GPT partition table"),
    ("LVM2_member", signatures.lvm2, "LVM2 physical volume"),
    ("xfs", _magic_at(0, b"XFSB"), "XFS filesystem"),
    ("btrfs", _magic_at(65600, b"_BHRfS_M"), "btrfs filesystem"),
    ("crypto_LUKS", _magic_at(0, b"LUKS\xba\xbe"), "LUKS encrypted volume"),
    ("iso9660", _magic_at(32769, b"CD001"), "ISO 9660 filesystem"),
    ("traxfs", _magic_at(4096, MAGIC), "traxfs filesystem or engine"),
]


@pytest.mark.parametrize(("kind", "build", "text"), BUILT_IN, ids=[k for k, _, _ in BUILT_IN])
def test_the_built_in_table_finds_each_signature(tmp_path: Path, kind: str, build, text: str) -> None:
    path = str(tmp_path / "x.img")
    build(path, SIZE)
    dev = ImageFileDevice(path)
    try:
        (found,) = identify(dev, path)  # the table alone: what a logical volume gets
        assert (found.kind, found.text) == (kind, text)
        assert all(dev.read(off, n) != bytes(n) for off, n in found.regions)  # the regions hold the magic
    finally:
        dev.close()


@pytest.mark.skipif(WIPEFS is None, reason="wipefs (util-linux) is not installed")
@pytest.mark.parametrize("build", [signatures.ext4, signatures.swap, signatures.mbr, signatures.gpt, signatures.lvm2],
                         ids=["ext4", "swap", "mbr", "gpt", "lvm2"])
def test_libblkid_agrees_with_the_table(tmp_path: Path, build) -> None:
    """The hand-written partition tables and LVM2 label are real enough for libblkid, and the
    table names them as libblkid does (merged into one finding each)."""
    path = str(tmp_path / "x.img")
    build(path, SIZE)
    seen = signatures.wipefs_types(path) - {"PMBR"}
    assert seen and kinds(path) == seen


def test_empty_and_own_structures(tmp_path: Path, capsys) -> None:
    home = tmp_path / "home"
    empty = str(tmp_path / "empty.img")
    signatures.blank(empty, SIZE)
    assert kinds(empty) == set()
    assert ENGINE_MAGIC == MAGIC  # the volume layer's copy of the engine's magic
    ok(capsys, home, "mkfs", tmp_path / "fs.img", "--size", "32M")
    assert kinds(str(tmp_path / "fs.img")) == {FS_KIND}
    ok(capsys, home, "pv", "create", tmp_path / "pv.img", "--size", "32M")
    assert kinds(str(tmp_path / "pv.img")) == {PV_KIND}


@pytest.mark.skipif(WIPEFS is None, reason="wipefs (util-linux) is not installed")
def test_a_signature_only_libblkid_knows_is_named_and_wiped(tmp_path: Path, capsys) -> None:
    """vfat is not in the table: wipefs finds it, the refusal names it, --force wipes it."""
    path = str(tmp_path / "x.img")
    signatures.blank(path, SIZE)
    boot = bytearray(512)  # a FAT32 boot sector, the fields libblkid checks
    boot[0:3], boot[3:11] = b"\xeb\x58\x90", b"MSWIN4.1"
    boot[11:13], boot[13], boot[14:16], boot[16] = (512).to_bytes(2, "little"), 8, (32).to_bytes(2, "little"), 2
    boot[21], boot[32:36], boot[36:40] = 0xF8, (SIZE // 512).to_bytes(4, "little"), (64).to_bytes(4, "little")
    boot[44:48], boot[66], boot[82:90], boot[510:512] = (2).to_bytes(4, "little"), 0x29, b"FAT32   ", b"\x55\xaa"
    signatures.write_at(path, 0, bytes(boot))
    if "vfat" not in signatures.wipefs_types(path):
        pytest.skip("this libblkid does not take the hand-made FAT32 boot sector")
    home = tmp_path / "home"
    before = sha(path)
    rc, err = cli(capsys, home, "pv", "create", path)
    assert rc == 1 and "vfat filesystem; use --force" in err, err
    assert sha(path) == before
    ok(capsys, home, "pv", "create", path, "--force")
    assert kinds(path) == {PV_KIND} and signatures.wipefs_types(path) == set()


# ----- the scenarios ---------------------------------------------------------------------
def test_mkfs_of_a_physical_volume_of_a_group_is_refused(tmp_path: Path, capsys) -> None:
    """Issue 12, item 1: pv create d0..d3; vg create vg0; lv create vg0/lin; trax mkfs d1.img
    gave rc 0 and destroyed the group's metadata and lin."""
    home = tmp_path / "home"
    disks = [str(tmp_path / f"d{i}.img") for i in range(4)]
    ok(capsys, home, "pv", "create", *disks, "--size", "32M")
    ok(capsys, home, "vg", "create", "vg0", *disks)
    ok(capsys, home, "lv", "create", "vg0/lin", "--size", "100M")  # extents on every device
    data = os.urandom(100 * MiB)
    with VolumeGroup.open(Registry(home), "vg0") as vg:
        vg.open_lv("lin").write(0, data)
    before = {d: sha(d) for d in disks}
    rc, err = cli(capsys, home, "mkfs", disks[1])
    assert rc == 1, err
    assert f"{disks[1]}: physical volume of volume group 'vg0' (logical volumes on it: lin); use --force" in err
    assert {d: sha(d) for d in disks} == before
    with VolumeGroup.open(Registry(home), "vg0") as vg:  # the group opens, whole, and lin is intact
        assert vg.warnings == [] and vg.open_lv("lin").read(0, len(data)) == data


def test_pv_create_and_vg_create_over_a_filesystem_are_refused(tmp_path: Path, capsys) -> None:
    """Issue 12, item 2: both labelled an image holding a traxfs filesystem, overwriting it."""
    home = tmp_path / "home"
    image = tmp_path / "fs.img"
    ok(capsys, home, "mkfs", image, "--size", "32M")
    before = sha(image)
    for args in (["pv", "create", image], ["vg", "create", "vgm", image]):
        rc, err = cli(capsys, home, *args)
        assert rc == 1 and f"{image}: traxfs filesystem or engine; use --force to destroy it" in err, (args, err)
        assert sha(image) == before
    assert Registry(home).paths() == []
    rc, _ = cli(capsys, home, "fsck", image)
    assert rc == 0


# ----- the matrix --------------------------------------------------------------------------------
def _state_traxfs(capsys, home: Path, path: str) -> None:
    ok(capsys, home, "mkfs", path, "--size", "32M")


def _state_orphan(capsys, home: Path, path: str) -> None:
    ok(capsys, home, "pv", "create", path, "--size", "32M")


def _state_group(capsys, home: Path, path: str) -> None:
    ok(capsys, home, "pv", "create", path, "--size", "32M")
    ok(capsys, home, "vg", "create", "g", path)
    ok(capsys, home, "lv", "create", "g/lin", "--size", "8M")


def _foreign(build) -> Callable:
    def state(capsys, home: Path, path: str) -> None:
        build(path, SIZE)
    return state


STATES = {  # name: (builder, what the refusal names)
    "traxfs": (_state_traxfs, "traxfs filesystem or engine"),
    "orphan-pv": (_state_orphan, "unused traxfs physical volume (no group yet)"),
    "group-pv": (_state_group, "physical volume of volume group 'g' (logical volumes on it: lin)"),
    "ext4": (_foreign(signatures.ext4), "ext4 filesystem (label 'old')"),
    "mbr": (_foreign(signatures.mbr), "MBR (dos) partition table"),
    "gpt": (_foreign(signatures.gpt), "GPT partition table"),
    "lvm2": (_foreign(signatures.lvm2), "LVM2 physical volume"),
    "empty": (_foreign(signatures.blank), None),
}


class Case:
    """One writer on one device state, in a fresh home under ``tmp``."""

    def __init__(self, tmp: Path, capsys, writer: str, state: str):
        self.tmp, self.capsys, self.writer, self.state = tmp, capsys, writer, state
        self.home = tmp / "home"
        self.target = str(tmp / "target.img")
        build = STATES[state][0]
        if writer == "mkfs VG/LV":  # the state goes into a volume: built elsewhere, copied in
            scratch = str(tmp / "scratch.img")
            build(capsys, tmp / "scratch-home", scratch)
            host = str(tmp / "h0.img")
            ok(capsys, self.home, "pv", "create", host, "--size", "48M")
            ok(capsys, self.home, "vg", "create", "h", host)
            ok(capsys, self.home, "lv", "create", "h/t", "--size", "32M")
            with VolumeGroup.open(Registry(self.home), "h") as vg, open(scratch, "rb") as f:
                vg.open_lv("t").write(0, f.read())
            self.watched = host
        else:
            build(capsys, self.home, self.target)
            self.watched = self.target
            if writer in ("vg extend", "vg replace"):
                hosts = [str(tmp / f"h{i}.img") for i in range(2)]
                ok(capsys, self.home, "pv", "create", *hosts, "--size", "32M")
                ok(capsys, self.home, "vg", "create", "h", *hosts)
                if writer == "vg replace":
                    os.remove(hosts[1])  # the device to replace is gone
                    self.gone = hosts[1]

    def argv(self, force: bool) -> list[str]:
        flag = ["--force"] if force else []
        return {
            "pv create": ["pv", "create", self.target],
            "vg create": ["vg", "create", "new", self.target],
            "vg extend": ["vg", "extend", "h", self.target],
            "vg replace": ["vg", "replace", "h", getattr(self, "gone", ""), self.target],
            "mkfs DEVICE": ["mkfs", self.target],
            "mkfs VG/LV": ["mkfs", "h/t"],
        }[self.writer] + flag

    def written_as(self) -> set[str]:
        """What the target identifies as now."""
        if self.writer != "mkfs VG/LV":
            return kinds(self.target)
        with VolumeGroup.open(Registry(self.home), "h", hold=READ) as vg:
            return {f.kind for f in identify(vg.open_lv("t"), "h/t")}


WRITERS = ["pv create", "vg create", "vg extend", "vg replace", "mkfs DEVICE", "mkfs VG/LV"]
GROUPING = {"vg create", "vg extend", "vg replace"}


def _allowed(writer: str, state: str, force: bool) -> bool:
    if state == "empty" or (writer in GROUPING and state == "orphan-pv"):
        return True  # nothing to destroy (an unused physical volume is what a group is made of)
    if writer in GROUPING and state == "group-pv":
        return False  # another group's device is never taken into a group, --force or not
    return force


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
@pytest.mark.parametrize("state", list(STATES))
@pytest.mark.parametrize("writer", WRITERS)
def test_writer_on_device_state(tmp_path: Path, capsys, writer: str, state: str, force: bool) -> None:
    case = Case(tmp_path, capsys, writer, state)
    before = sha(case.watched)
    rc, err = cli(capsys, case.home, *case.argv(force))
    if not _allowed(writer, state, force):
        assert rc == 1, err
        assert STATES[state][1] in err and "Traceback" not in err, err
        stronger = writer in GROUPING and state == "group-pv"
        assert ("even with --force" if force or stronger else "use --force") in err, err
        assert sha(case.watched) == before, "a refused writer changed the device"
        return
    assert rc == 0, err
    assert case.written_as() == ({FS_KIND} if writer.startswith("mkfs") else {PV_KIND}), \
        "the device identifies as more than what was written (leftover magic not wiped)"


# ----- new volumes, and what the commands say ----------------------------------------------------
def test_a_new_volume_identifies_as_empty(tmp_path: Path, capsys) -> None:
    """lv create wipes what its extents still show of an earlier volume (here a traxfs at the
    first new volume's start, an ext4 at the second's), so mkfs of a new volume needs no --force."""
    home = tmp_path / "home"
    ok(capsys, home, "pv", "create", tmp_path / "d.img", "--size", "128M")
    ok(capsys, home, "vg", "create", "vg", tmp_path / "d.img")
    ok(capsys, home, "lv", "create", "vg/a", "--size", "64M")
    ok(capsys, home, "mkfs", "vg/a")
    signatures.ext4(str(tmp_path / "e.img"), 1 * MiB)
    with VolumeGroup.open(Registry(home), "vg") as vg, open(tmp_path / "e.img", "rb") as f:
        vg.open_lv("a").write(32 * MiB, f.read())
    ok(capsys, home, "lv", "remove", "vg/a")
    ok(capsys, home, "lv", "create", "vg/b", "--size", "32M")
    ok(capsys, home, "lv", "create", "vg/c", "--size", "32M")
    with VolumeGroup.open(Registry(home), "vg", hold=READ) as vg:
        assert [seg.areas[0].pe for lv in vg.meta.lvs for seg in lv.legs[0].segments] == [0, 8]  # a's extents
        assert [f.text for f in identify(vg.open_lv("b"), "vg/b")] == []
        assert [f.text for f in identify(vg.open_lv("c"), "vg/c")] == []
    ok(capsys, home, "mkfs", "vg/b")
    ok(capsys, home, "mkfs", "vg/c")


def test_vg_list_shows_a_degraded_group(tmp_path: Path, capsys) -> None:
    """A group missing a device, and one with a device that missed a commit (stale), are listed
    as degraded, naming the devices; a whole group is ok."""
    home = tmp_path / "home"
    disks = [str(tmp_path / f"d{i}.img") for i in range(5)]
    ok(capsys, home, "pv", "create", *disks, "--size", "16M")
    ok(capsys, home, "vg", "create", "gone", *disks[:2])
    ok(capsys, home, "vg", "create", "lagging", *disks[2:4])
    ok(capsys, home, "vg", "create", "whole", disks[4])
    os.remove(disks[1])
    with open(disks[3], "rb") as f:
        old = f.read(2 * MiB)
    ok(capsys, home, "lv", "create", "lagging/x", "--size", "4M")
    signatures.write_at(disks[3], 0, old)  # as if it had been away during that commit
    capsys.readouterr()
    assert main(["--home", str(home), "--json", "vg", "list"]) == 0
    docs = {d["name"]: (d["state"], d["missing"], d["stale"]) for d in json.loads(capsys.readouterr().out)}
    assert docs == {"gone": ("degraded", [disks[1]], []), "lagging": ("degraded", [], [disks[3]]),
                    "whole": ("ok", [], [])}
    assert main(["--home", str(home), "vg", "list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[-1] == "STATE"
    assert sorted(r.split("  ")[0] + " " + r.split(None, 5)[-1] for r in rows) == [
        f"gone degraded (missing {disks[1]})", f"lagging degraded (stale {disks[3]})", "whole ok"]


def test_advice_names_what_to_do(tmp_path: Path, capsys) -> None:
    """A member cannot be pv-removed: the advice is 'trax vg remove' (there is no vg reduce); a
    cloned device: remove the copy's line from the devices file, or relabel the copy."""
    home = tmp_path / "home"
    disks = [str(tmp_path / f"d{i}.img") for i in range(2)]
    ok(capsys, home, "pv", "create", *disks, "--size", "16M")
    ok(capsys, home, "vg", "create", "vg0", *disks)
    rc, err = cli(capsys, home, "pv", "remove", disks[0])
    assert rc == 1 and "'trax vg remove vg0'" in err and "reduce" not in err, err
    clone = str(tmp_path / "clone.img")
    shutil.copyfile(disks[0], clone)
    Registry(home).add(clone)
    rc, err = cli(capsys, home, "lv", "create", "vg0/x", "--size", "4M")
    assert rc == 1 and "(a cloned device?)" in err, err
    assert f"remove the copy's line from {home / 'devices'}" in err and f"'trax pv create --force {clone}'" in err
    ok(capsys, home, "pv", "create", "--force", clone)  # what the advice says works
    ok(capsys, home, "lv", "create", "vg0/x", "--size", "4M")

"""What is on a device: identified before anything writes it.

Every command that writes a whole device or a logical volume (``mkfs``, ``pv create``, the
labelling in ``vg create``/``extend``/``replace``) first calls :func:`identify`, and refuses —
naming what it found — unless ``--force``; a new logical volume has what :func:`identify`
finds on its first bytes wiped, so it identifies as empty.

Two sources, merged by signature type:

* a built-in table, read through the device itself: traxfs's own physical-volume label (with
  its group and the logical volumes on the device) and filesystem (the engine superblock), and
  the common foreign signatures — ext2/3/4, XFS, btrfs, an LVM2 physical volume, swap, LUKS,
  ISO 9660, MBR and GPT partition tables. It works on anything with ``read`` — a logical
  volume too, which has no path an outside tool could probe — and on a machine without
  util-linux;
* ``wipefs`` (util-linux, listing mode: read only), for a device path: every signature libblkid
  knows — the long tail of filesystems, RAID members and partition tables — exactly what
  ``wipefs`` itself would erase.

With ``--force`` the writer writes its own structures and then :func:`wipe_leftovers` erases the
magic bytes of every foreign signature still readable (``wipefs -a`` semantics), so an ext4
superblock that the new label did not overwrite cannot make the device identify as ext4 later.
The traxfs filesystem magic here must stay equal to the engine's (``fs/engine/superblock.py``;
a test checks it): the volume layer may not import the filesystem.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from typing import Protocol

from .errors import LabelError, MetadataError, OccupiedError
from .label import LABEL_MAGIC, LABEL_OFFSETS, read_labels
from .metadata_area import MDA_MAGIC, ORPHAN_FORMAT, newest, read_slots
from .model import VolumeGroupMeta

PV_KIND = "traxfs_member"  # a traxfs physical-volume label
FS_KIND = "traxfs"  # a traxfs filesystem (its engine superblock)
ENGINE_MAGIC = b"TRAXENG1"
ENGINE_COPIES = (0, 4096)
WIPEFS_TIMEOUT = 30
HEAD = 72 * 1024  # the built-in signatures all lie in the first 68 KiB (btrfs's the deepest)


class Readable(Protocol):
    """A device or an open logical volume: what identification reads through."""

    size: int

    def read(self, offset: int, length: int) -> bytes: ...


class Writable(Readable, Protocol):
    """What wiping writes through."""

    def write(self, offset: int, data: bytes) -> None: ...


@dataclass
class Finding:
    """One thing found: its type (libblkid's name for foreign ones), a description for people,
    and the (offset, length) of its magic bytes — what wiping erases."""

    kind: str
    text: str
    regions: list[tuple[int, int]] = field(default_factory=list)
    group: str | None = None  # a traxfs physical volume's group (None: unused or unreadable)

    @property
    def ours(self) -> bool:
        return self.kind in (PV_KIND, FS_KIND)


def identify(dev: Readable, where: str, path: str | None = None) -> list[Finding]:
    """Everything recognisable on ``dev`` (``where`` names it in descriptions); ``path`` also
    asks ``wipefs`` about the device file. An all-zero device gives ``[]``."""
    found: dict[str, Finding] = {}
    reader = _Reader(dev, where)
    for probe in _PROBES:
        f = probe(reader, where)
        if f is not None:
            found.setdefault(f.kind, f)
    if path is not None:
        for f in _wipefs(path):
            mine = found.get(f.kind)
            if mine is None:
                found[f.kind] = f
            else:
                mine.regions.extend(r for r in f.regions if r not in mine.regions)
    return list(found.values())


def describe(findings: list[Finding]) -> str:
    return "; ".join(f.text for f in findings)


def refuse_unless_forced(where: str, findings: list[Finding], force: bool) -> None:
    """Refuse, naming what is there, unless ``force`` (or there is nothing)."""
    if findings and not force:
        raise OccupiedError(f"{where}: {describe(findings)}; use --force to destroy it")


def wipe_leftovers(dev: Writable, where: str, path: str | None = None) -> list[Finding]:
    """After a forced write: erase the magic of every foreign signature still on ``dev`` (the
    writer's own structures overwrote the rest); return what was erased."""
    left = [f for f in identify(dev, where, path) if not f.ours]
    for f in left:
        for off, n in f.regions:
            if 0 <= off and off + n <= dev.size:
                dev.write(off, bytes(n))
    return left


# ----- the built-in table ----------------------------------------------------------------------
class _Reader:
    """What the probes read through: ``dev`` under the name ``where`` (label and metadata
    messages use it), its first ``HEAD`` bytes — where most signatures live — read at once."""

    def __init__(self, dev: Readable, where: str):
        self.dev, self.path, self.size = dev, where, dev.size
        self._head = dev.read(0, min(HEAD, dev.size))

    def read(self, offset: int, length: int) -> bytes:
        if offset + length <= len(self._head):
            return self._head[offset : offset + length]
        return self.dev.read(offset, length)

def _at(dev: Readable, off: int, n: int) -> bytes:
    """``n`` bytes at ``off``, or b"" if the device is too small (or ``off`` negative)."""
    if off < 0 or off + n > dev.size:
        return b""
    return dev.read(off, n)


def _traxfs_pv(dev: Readable, where: str) -> Finding | None:
    regions = [(off, len(LABEL_MAGIC)) for off in LABEL_OFFSETS if _at(dev, off, len(LABEL_MAGIC)) == LABEL_MAGIC]
    try:
        label, _ = read_labels(dev)
    except LabelError as e:
        if not regions:
            return None
        return Finding(PV_KIND, f"damaged traxfs physical volume label ({e})", regions)
    regions += [(label.mda_offset + i * label.mda_slot, len(MDA_MAGIC)) for i in range(label.mda_count)]
    copy = newest(read_slots(dev, label))
    if copy is None:
        return Finding(PV_KIND, "traxfs physical volume whose metadata is unreadable", regions)
    if copy.doc.get("format") == ORPHAN_FORMAT:
        return Finding(PV_KIND, "unused traxfs physical volume (no group yet)", regions)
    name = copy.doc.get("name")
    try:
        lvs = sorted(lv.name for lv in VolumeGroupMeta.from_doc(copy.doc, where).lvs if label.pv_uuid in lv.pvs())
        on_it = f"logical volumes on it: {', '.join(lvs)}" if lvs else "no logical volume on it"
    except MetadataError:
        on_it = "its metadata is invalid"
    return Finding(PV_KIND, f"physical volume of volume group {name!r} ({on_it})", regions, group=name)


def _traxfs_fs(dev: Readable, where: str) -> Finding | None:
    regions = [(off, len(ENGINE_MAGIC)) for off in ENGINE_COPIES if _at(dev, off, len(ENGINE_MAGIC)) == ENGINE_MAGIC]
    return Finding(FS_KIND, "traxfs filesystem or engine", regions) if regions else None


def _ext(dev: Readable, where: str) -> Finding | None:
    sb = _at(dev, 1024, 1024)
    if len(sb) < 1024 or sb[56:58] != b"\x53\xef" or struct.unpack_from("<I", sb, 24)[0] > 6:
        return None  # no magic, or a block size (1024 << s_log_block_size) no ext filesystem has
    compat, incompat = struct.unpack_from("<II", sb, 92)
    kind = "ext4" if incompat & 0x2C0 else "ext3" if compat & 0x4 else "ext2"  # extents|64bit|flex_bg; journal
    return Finding(kind, f"{kind} filesystem{_volume_name(sb[120:136])}", [(1080, 2)])


def _volume_name(raw: bytes) -> str:
    name = raw.split(b"\0")[0].decode(errors="replace")
    return f" (label {name!r})" if name else ""


def _magic(kind: str, text: str, offset: int, magic: bytes):
    def probe(dev: Readable, where: str) -> Finding | None:
        return Finding(kind, text, [(offset, len(magic))]) if _at(dev, offset, len(magic)) == magic else None
    return probe


def _lvm2(dev: Readable, where: str) -> Finding | None:
    for sector in range(4):  # LVM2 puts its label in one of the first four sectors
        base = sector * 512
        if _at(dev, base, 8) == b"LABELONE" and _at(dev, base + 24, 8) == b"LVM2 001":
            return Finding("LVM2_member", "LVM2 physical volume", [(base, 8), (base + 24, 8)])
    return None


def _swap(dev: Readable, where: str) -> Finding | None:
    for page in (4096, 8192, 16384, 65536):  # the magic ends the first page, whatever its size
        if _at(dev, page - 10, 10) in (b"SWAPSPACE2", b"SWAP-SPACE"):
            return Finding("swap", "swap space", [(page - 10, 10)])
    return None


def _gpt(dev: Readable, where: str) -> Finding | None:
    regions = []
    for sector in (512, 4096):
        regions += [(off, 8) for off in (sector, dev.size - sector) if _at(dev, off, 8) == b"EFI PART"]
    if not regions:
        return None
    if _at(dev, 510, 2) == b"\x55\xaa":
        regions.append((510, 2))  # the protective MBR in front of it
    return Finding("gpt", "GPT partition table", regions)


def _dos(dev: Readable, where: str) -> Finding | None:
    """An MBR partition table: the boot signature and at least one sane, used entry (a boot
    sector without a table — FAT, NTFS — has code where the entries would be)."""
    mbr = _at(dev, 0, 512)
    if len(mbr) < 512 or mbr[510:512] != b"\x55\xaa":
        return None
    entries = [mbr[446 + 16 * i : 462 + 16 * i] for i in range(4)]
    if any(e[0] not in (0, 0x80) for e in entries):
        return None
    used = [e for e in entries if e[4] and struct.unpack_from("<I", e, 12)[0]]
    if not used or any(e[4] == 0xEE for e in used):  # 0xEE: protective, a GPT disk (see _gpt)
        return None
    return Finding("dos", "MBR (dos) partition table", [(510, 2)])


_PROBES = (
    _traxfs_pv, _traxfs_fs, _ext, _lvm2, _swap, _gpt, _dos,
    _magic("xfs", "XFS filesystem", 0, b"XFSB"),
    _magic("btrfs", "btrfs filesystem", 65600, b"_BHRfS_M"),
    _magic("crypto_LUKS", "LUKS encrypted volume", 0, b"LUKS\xba\xbe"),
    _magic("iso9660", "ISO 9660 filesystem", 32769, b"CD001"),
)

# ----- wipefs ----------------------------------------------------------------------------------
_USAGE = {"filesystem": "filesystem", "partition-table": "partition table", "raid": "RAID member",
          "crypto": "encrypted volume"}
_SAME = {"PMBR": "gpt"}  # wipefs lists a GPT disk's protective MBR on its own line


def _wipefs(path: str) -> list[Finding]:
    """What ``wipefs`` (listing only) sees on ``path``; nothing if it is not installed."""
    tool = shutil.which("wipefs", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if tool is None:
        return []
    try:
        r = subprocess.run([tool, "--json", "--output", "OFFSET,LENGTH,TYPE,USAGE,LABEL", path],
                           capture_output=True, text=True, timeout=WIPEFS_TIMEOUT)
        rows = json.loads(r.stdout)["signatures"] if r.returncode == 0 and r.stdout.strip() else []
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError):
        return []
    out: dict[str, Finding] = {}
    for row in rows:
        try:
            kind = _SAME.get(row["type"], row["type"])
            region = (int(str(row["offset"]), 0), int(row["length"]))
        except (KeyError, TypeError, ValueError):
            continue
        label = f" (label {row['label']!r})" if row.get("label") else ""
        text = f"{kind} {_USAGE.get(row.get('usage'), 'signature')}{label}"
        out.setdefault(kind, Finding(kind, text)).regions.append(region)
    return list(out.values())
